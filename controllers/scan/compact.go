package scan

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// lastApplied is the annotation kubectl writes with a full copy of the object.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// compact turns an object from the API into the store's form (compact
// JSON, decoded again when evaluated): managedFields
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
	h, admission, err := report.Hashes(obj)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	res := memstore.NewResource(string(u.GetUID()), group, version, u.GetKind(), u.GetNamespace(), u.GetName(),
		u.GetResourceVersion(), h, data)
	if admission != h {
		res.AdmissionHash = admission
	}
	return res, nil
}

// head is what match/exclude read of a resource.
type head struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// headOf decodes only the identity, labels and annotations of a stored
// resource: enough for match/exclude (engine.Rule.Applies), at a fraction
// of a full decode's cost.
func headOf(res *memstore.Resource) (map[string]any, error) {
	var h head
	if err := json.Unmarshal(res.Data, &h); err != nil {
		return nil, err
	}
	md := map[string]any{"name": h.Metadata.Name}
	if h.Metadata.Namespace != "" {
		md["namespace"] = h.Metadata.Namespace
	}
	if len(h.Metadata.Labels) > 0 {
		md["labels"] = stringsToAny(h.Metadata.Labels)
	}
	if len(h.Metadata.Annotations) > 0 {
		md["annotations"] = stringsToAny(h.Metadata.Annotations)
	}
	return map[string]any{"apiVersion": h.APIVersion, "kind": h.Kind, "metadata": md}, nil
}

func stringsToAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
