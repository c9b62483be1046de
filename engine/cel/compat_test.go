package cel

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// orValue on a value that is not an optional returns the value, as on the
// API server 1.35 (cel-go v0.26) and in Kyverno 1.19; on a real optional it
// is the optional's value or the default.
func TestOrValueOnAPlainValue(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "a",
		"securityContext": map[string]any{"capabilities": map[string]any{"add": []any{"NET_BIND_SERVICE"}}}}}}}
	for _, e := range []string{
		"object.spec.containers[0].securityContext.capabilities.add.orValue([]).size() == 1",
		"object.spec.containers.all(c, c.securityContext.capabilities.add.orValue([]) == ['NET_BIND_SERVICE'])",
		"object.spec.containers[0].name.orValue('x') == 'a'",
		"object.spec.?nothere.orValue('x') == 'x'",
		"object.spec.containers[0].?name.orValue('x') == 'a'",
		"object.spec.containers[0].name.orValue('') + object.spec.?nothere.orValue('b') == 'ab'",
	} {
		p, err := Compile(Spec{Mode: ModeKubernetes, Validations: []admissionregistrationv1.Validation{{Expression: e}}})
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if out := p.Evaluate(context.Background(), &Input{Object: obj}); out.Failed != -1 || out.Err != nil {
			t.Errorf("%s: failed validation %d, error %v; want it to hold", e, out.Failed, out.Err)
		}
	}
}
