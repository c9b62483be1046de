package scan

import (
	"encoding/json"
	"hash/fnv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/memstore"
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
	h, err := contentHash(obj)
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

// contentHash hashes what a policy can meaningfully react to: everything but
// status and the metadata fields that change on every write.
func contentHash(obj map[string]any) (uint64, error) {
	view := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "status" {
			view[k] = v
		}
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		m := make(map[string]any, len(md))
		for k, v := range md {
			switch k {
			case "resourceVersion", "generation", "managedFields":
			default:
				m[k] = v
			}
		}
		view["metadata"] = m
	}
	data, err := json.Marshal(view) // map keys are sorted: a stable encoding
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64(), nil
}
