package tester

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// paramObjects serves a test's paramResources to ValidatingAdmissionPolicy
// bindings, as the API server's informer would: by kind, namespace and
// name, or by label selector.
type paramObjects []map[string]any

// Params implements engine.ParamSource.
func (p paramObjects) Params(_ context.Context, kind schema.GroupVersionKind, namespace, name string, selector *metav1.LabelSelector) ([]map[string]any, error) {
	var sel labels.Selector
	if name == "" {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(selector); err != nil {
			return nil, err
		}
	}
	var out []map[string]any
	for _, obj := range p {
		apiVersion, _ := obj["apiVersion"].(string)
		k, _ := obj["kind"].(string)
		if apiVersion != kind.GroupVersion().String() || k != kind.Kind {
			continue
		}
		md, _ := obj["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		if ns != "" && namespace != "" && ns != namespace {
			continue
		}
		if name != "" {
			if n, _ := md["name"].(string); n == name {
				out = append(out, obj)
			}
			continue
		}
		if sel.Matches(labels.Set(stringLabels(md["labels"]))) {
			out = append(out, obj)
		}
	}
	return out, nil
}

func stringLabels(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, val := range m {
		out[k], _ = val.(string)
	}
	return out
}
