package podsecurity

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/policy"
)

// TestFieldListsMatchTheChecks holds the field lists to the checks, for every
// revision of every check, on generated pods: a failed check lists at least
// one field, the lists leave the pod alone, and setting the listed fields to
// allowed values makes the check pass.
func TestFieldListsMatchTheChecks(t *testing.T) {
	g := newPodGen(1)
	failures := map[policy.CheckID]int{}
	for range 3000 {
		meta, spec := g.pod()
		before := spec.DeepCopy()
		pod := &Pod{Meta: meta, Spec: spec}
		for _, chk := range policy.DefaultChecks() {
			for _, vc := range chk.Versions {
				if vc.CheckPod(meta, spec).Allowed {
					continue
				}
				failures[chk.ID]++
				fields := enumeratorFor(chk.ID, vc.MinimumVersion)
				if fields == nil {
					t.Fatalf("%s has no field list", chk.ID)
				}
				vs := fields(meta, spec, newOracle(vc.CheckPod))
				if len(vs) == 0 {
					t.Fatalf("%s@%s failed (%s) and lists no field\n%+v", chk.ID, vc.MinimumVersion, vc.CheckPod(meta, spec).ForbiddenDetail, spec)
				}
				for _, v := range vs {
					if !strings.HasPrefix(v.path, "spec.") && !strings.HasPrefix(v.path, "metadata.annotations[") {
						t.Errorf("%s lists a field outside the pod: %s", chk.ID, v.path)
					}
					if v.ref.podLevel() == strings.Contains(v.path, "ontainers[") {
						t.Errorf("%s lists %s with the container %+v", chk.ID, v.path, v.ref)
					}
				}
				m, s := neutralised(pod, vs)
				if r := vc.CheckPod(m, s); !r.Allowed {
					t.Fatalf("%s@%s still fails once its fields are fixed: %s\nfields: %+v", chk.ID, vc.MinimumVersion, r.ForbiddenDetail, vs)
				}
			}
		}
		if !equality.Semantic.DeepEqual(before, spec) || !maps.Equal(meta.Annotations, pod.Meta.Annotations) {
			t.Fatal("listing or fixing fields modified the pod")
		}
	}
	for _, chk := range policy.DefaultChecks() {
		if failures[chk.ID] < 20 {
			t.Errorf("the generated pods fail %s only %d times: the property is barely tested", chk.ID, failures[chk.ID])
		}
	}
}

func TestIndexPattern(t *testing.T) {
	tests := map[string]string{
		"spec.hostNetwork":                              "spec.hostNetwork",
		"spec.containers[0].ports[12].hostPort":         "spec.containers[*].ports[*].hostPort",
		"spec.securityContext.sysctls[3].name":          "spec.securityContext.sysctls[*].name",
		"metadata.annotations[container.apparmor/app1]": "metadata.annotations[container.apparmor/app1]",
		"metadata.annotations[a[1]]":                    "metadata.annotations[a[*]]",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			if got := indexPattern(in); got != want {
				t.Errorf("indexPattern(%q) = %q, want %q", in, got, want)
			}
		})
	}
}

// TestNeutralisedCopiesAnnotations: fixes write to a copy of the metadata.
func TestNeutralisedCopiesAnnotations(t *testing.T) {
	meta := &metav1.ObjectMeta{Annotations: map[string]string{"k": "v"}}
	vs := []violation{{fix: setAnnotation("k", "fixed")}}
	m, _ := neutralised(&Pod{Meta: meta, Spec: &corev1.PodSpec{}}, vs)
	if m.Annotations["k"] != "fixed" || meta.Annotations["k"] != "v" {
		t.Errorf("copy %v, original %v", m.Annotations, meta.Annotations)
	}
}
