package scan

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/api/apiresources"
)

func vapObject(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// TestValidatingAdmissionPolicyFollowsItsBindingsAndLabel drives the
// scanner's handling of ValidatingAdmissionPolicies (R36): a binding that
// arrives after its policy recompiles and rescans it, results name the
// binding, and a policy whose label goes loses its results.
func TestValidatingAdmissionPolicyFollowsItsBindingsAndLabel(t *testing.T) {
	s := testScanner(t, Options{NoPolicyStatus: true})
	s.handlers.kinds.disc = listDiscovery{lists: []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}}}}
	s.handlers.kinds.remember(gvrConfigMaps, "", "ConfigMap")
	s.handlers.kinds.users[gvrConfigMaps] = map[string]bool{"(kept by the test)": true} // no source is started
	ctx := context.Background()
	work := func() {
		for s.handlers.queue.Len() > 0 {
			if !s.handlers.queue.ProcessNext(ctx, "scan", s.evaluator.reconcile) {
				return
			}
		}
	}
	for _, name := range []string{"good", "bad"} {
		s.handlers.upsertResource(context.Background(), gvrConfigMaps, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name, "resourceVersion": "1"}}})
	}
	policy := `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: names, resourceVersion: "1", labels: {reports.kyverno.io/enabled: "%s"}}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}]
  validations:
  - expression: "object.metadata.name != 'bad'"
`
	results := func() string {
		var out []string
		for _, uid := range []string{"uid-good", "uid-bad"} {
			rs, err := s.handlers.store.Read().Results(uid)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				e := r.Value()
				out = append(out, uid+":"+e.Policy+"/"+e.Rule+"="+string(e.Result)+"["+e.Properties+"]")
			}
		}
		return strings.Join(out, " ")
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"unlabelled: not scanned", func() {
			s.handlers.Upsert(context.Background(), apiresources.ValidatingAdmissionPolicy, vapObject(t, strings.Replace(policy, "%s", "false", 1)))
		}, ""},
		{"labelled, no binding: on its own constraints", func() {
			s.handlers.Upsert(context.Background(), apiresources.ValidatingAdmissionPolicy, vapObject(t, strings.Replace(policy, "%s", "true", 1)))
		}, "uid-good:names/names=pass[] uid-bad:names/names=fail[]"},
		{"a binding for the bad one only", func() {
			s.handlers.Upsert(context.Background(), apiresources.ValidatingAdmissionPolicyBinding, vapObject(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: only-bad, resourceVersion: "1"}
spec:
  policyName: names
  validationActions: [Audit]
  matchResources:
    objectSelector: {}
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps], resourceNames: [bad]}]
`))
		}, "uid-bad:names/names=fail[{\"binding\":\"only-bad\"}]"},
		{"the binding deleted", func() {
			s.handlers.Remove(context.Background(), apiresources.ValidatingAdmissionPolicyBinding, vapObject(t, `{apiVersion: admissionregistration.k8s.io/v1, kind: ValidatingAdmissionPolicyBinding, metadata: {name: only-bad}}`))
		}, "uid-good:names/names=pass[] uid-bad:names/names=fail[]"},
		{"the label turned off", func() {
			s.handlers.Upsert(context.Background(), apiresources.ValidatingAdmissionPolicy, vapObject(t, strings.Replace(policy, "%s", "false", 1)))
		}, ""},
	}
	for _, step := range steps {
		step.do()
		settle(t, s)
		work()
		if got := results(); got != step.want {
			t.Errorf("%s: results %q, want %q", step.name, got, step.want)
		}
	}
}
