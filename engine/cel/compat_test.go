package cel

import (
	"context"
	"strings"
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

// Variables are evaluated when first read, once: an unread one that would
// fail costs nothing; a read one that fails names itself.
func TestVariablesAreLazy(t *testing.T) {
	vars := []admissionregistrationv1.Variable{
		{Name: "broken", Expression: "object.nothere.deeper"},
		{Name: "two", Expression: "1 + 1"},
		{Name: "four", Expression: "variables.two * variables.two"},
	}
	for _, tc := range []struct {
		expr    string
		holds   bool
		errPart string
	}{
		{"variables.four == 4", true, ""},
		{"variables.broken == 1", false, `composited variable "broken" fails to evaluate`},
		{"has(variables.two)", true, ""},
	} {
		p, err := Compile(Spec{Mode: ModeKubernetes, Variables: vars, Validations: []admissionregistrationv1.Validation{{Expression: tc.expr}}})
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		out := p.Evaluate(context.Background(), &Input{Object: map[string]any{}})
		if holds := out.Failed == -1; holds != tc.holds {
			t.Errorf("%s: holds %v, want %v (error %v)", tc.expr, holds, tc.holds, out.Err)
		}
		if tc.errPart != "" && (out.Err == nil || !strings.Contains(out.Err.Error(), tc.errPart)) {
			t.Errorf("%s: error %v, want one saying %q", tc.expr, out.Err, tc.errPart)
		}
	}
}
