package podsecurity

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod is the pod part of a resource, read once and shared by every
// podSecurity rule evaluated against it. It is partial: Spec holds only the
// fields the Pod Security Standards checks read (see decode.go), and Meta
// only the name, namespace and annotations. Read-only once built.
type Pod struct {
	Meta *metav1.ObjectMeta
	Spec *corev1.PodSpec
	// paths maps the pod's own field paths to the resource's, for messages.
	paths pathPrefix
}

// pathPrefix is where the pod template's metadata and spec sit in a resource.
type pathPrefix struct{ meta, spec string }

var (
	podPaths      = pathPrefix{meta: "metadata", spec: "spec"}
	templatePaths = pathPrefix{meta: "spec.template.metadata", spec: "spec.template.spec"}
	cronJobPaths  = pathPrefix{meta: "spec.jobTemplate.spec.template.metadata", spec: "spec.jobTemplate.spec.template.spec"}
)

// template returns the object holding the pod's metadata and spec for the
// kinds Kyverno's podSecurity rules evaluate, and where it sits.
func template(kind string, obj map[string]any) (map[string]any, pathPrefix, error) {
	var tmpl map[string]any
	var paths pathPrefix
	switch kind {
	case "Pod":
		tmpl, paths = obj, podPaths
	case "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController":
		tmpl, paths = dig(obj, "spec", "template"), templatePaths
	case "CronJob":
		tmpl, paths = dig(obj, "spec", "jobTemplate", "spec", "template"), cronJobPaths
	default:
		return nil, pathPrefix{}, fmt.Errorf("podSecurity applies to Pods and Pod controllers, not to %q", kind)
	}
	if _, ok := tmpl["spec"].(map[string]any); !ok {
		return nil, pathPrefix{}, fmt.Errorf("%s has no pod spec at %s", kind, paths.spec)
	}
	return tmpl, paths, nil
}

// PodOf reads the pod of a Pod or a Pod controller given as JSON values
// (numbers as float64, int64, int or json.Number).
func PodOf(kind string, obj map[string]any) (*Pod, error) {
	tmpl, paths, err := template(kind, obj)
	if err != nil {
		return nil, err
	}
	meta, err := metaOf(tmpl["metadata"])
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", paths.meta, err)
	}
	spec, err := decodePodSpec(tmpl["spec"])
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", paths.spec, err)
	}
	return &Pod{Meta: meta, Spec: spec, paths: paths}, nil
}

func dig(m map[string]any, path ...string) map[string]any {
	cur := m
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

// metaOf reads the name, namespace and annotations: the only metadata the
// checks read (AppArmor and seccomp annotations).
func metaOf(v any) (*metav1.ObjectMeta, error) {
	meta := &metav1.ObjectMeta{}
	m, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			return nil, fmt.Errorf("metadata is a %T, not an object", v)
		}
		return meta, nil
	}
	meta.Name, _ = m["name"].(string)
	meta.Namespace, _ = m["namespace"].(string)
	switch a := m["annotations"].(type) {
	case nil:
	case map[string]any:
		meta.Annotations = make(map[string]string, len(a))
		for k, v := range a {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("annotation %q is a %T, not a string", k, v)
			}
			meta.Annotations[k] = s
		}
	default:
		return nil, fmt.Errorf("annotations are a %T, not an object", a)
	}
	return meta, nil
}
