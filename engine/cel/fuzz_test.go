package cel

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// FuzzCompileEvaluate compiles arbitrary expressions, in both modes, as a
// variable, a match condition, a validation and its messageExpression, and
// evaluates them on arbitrary JSON: compile errors are reported, never a
// panic; evaluation ends within its deadline with an outcome, the same
// on the object made Shared.
func FuzzCompileEvaluate(f *testing.F) {
	for _, seed := range []struct{ expr, obj string }{
		{"object.spec.containers.all(c, c.image.startsWith('nginx'))", `{"spec":{"containers":[{"image":"nginx"}]}}`},
		{"object.?spec.?replicas.orValue(1) <= 5", `{"spec":{"replicas":3}}`},
		{"variables.v.size() > 0 && json.unmarshal('[1]')[0] == 1", `{}`},
		{"[1,2,3].map(x, x * 2).exists(y, y == 4)", `null`},
		{"object.metadata.name.matches('^[a-z]+$')", `{"metadata":{"name":"x"}}`},
		{"quantity(object.q).isLessThan(quantity('1Gi'))", `{"q":"512Mi"}`},
		{"sha256(string(object)) != ''", `{"a":[1,2.5,"x",true,null]}`},
		{"resource.Get('v1', 'configmaps', 'ns', 'n').data.x == 'y'", `{}`},
	} {
		f.Add(seed.expr, seed.obj)
	}
	f.Fuzz(func(t *testing.T, expr, obj string) {
		if len(expr) > 2048 || len(obj) > 16<<10 {
			return
		}
		var object any
		if json.Unmarshal([]byte(obj), &object) != nil {
			return
		}
		for _, mode := range []Mode{ModeKubernetes, ModeKyverno} {
			p, err := Compile(Spec{
				Mode:            mode,
				Variables:       []admissionregistrationv1.Variable{{Name: "v", Expression: expr}},
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "c", Expression: expr}},
				Validations:     []admissionregistrationv1.Validation{{Expression: expr, MessageExpression: expr}},
			})
			if p == nil {
				t.Fatalf("no program (%v)", err)
			}
			if err != nil && !strings.Contains(strings.ToLower(err.Error()), "expression") {
				t.Fatalf("a compile error that names no expression: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			o := p.Evaluate(ctx, &Input{Object: Normalize(object), Request: map[string]any{"operation": "CREATE"}})
			cancel()
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("evaluation took %v, past its deadline", d)
			}
			if o.Failed >= 0 && o.Failed >= p.Validations() {
				t.Fatalf("failed validation %d of %d", o.Failed, p.Validations())
			}
			// The object made Shared gives the same outcome.
			s := p.Evaluate(context.Background(), &Input{Object: Shared(Normalize(object)), Request: map[string]any{"operation": "CREATE"}})
			if describe(s) != describe(o) && !strings.Contains(describe(o), "cost") {
				t.Fatalf("shared object: %s; plain: %s", describe(s), describe(o))
			}
		}
	})
}
