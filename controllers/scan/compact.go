package scan

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// lastApplied is the annotation kubectl writes with a full copy of the object.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// compact turns an object from the API into the store's form: managedFields
// and kubectl's last-applied copy are dropped (no policy reads them and they
// are often half an object's size), and the content hash is computed without
// status and metadata that change on every write.
func compact(u *unstructured.Unstructured) (*memstore.Resource, error) {
	obj := u.Object
	md, _ := obj["metadata"].(map[string]any)
	if md != nil {
		delete(md, "managedFields")
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, lastApplied)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	}
	gv := u.GetAPIVersion()
	group, version := "", gv
	if i := strings.Index(gv, "/"); i >= 0 {
		group, version = gv[:i], gv[i+1:]
	}
	h, err := report.ContentHash(obj)
	if err != nil {
		return nil, err
	}
	return &memstore.Resource{
		UID:             string(u.GetUID()),
		Group:           group,
		Version:         version,
		Kind:            u.GetKind(),
		Namespace:       u.GetNamespace(),
		Name:            u.GetName(),
		Labels:          u.GetLabels(),
		ResourceVersion: u.GetResourceVersion(),
		Hash:            h,
		Object:          obj,
	}, nil
}
