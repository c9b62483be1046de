package cel

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func pod(replicas float64, labels map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "ns", "labels": labels},
		"spec": map[string]any{
			"replicas":   replicas,
			"containers": []any{map[string]any{"name": "c", "image": "nginx:1.2"}},
		},
	}
}

func validations(exprs ...string) []admissionregistrationv1.Validation {
	out := make([]admissionregistrationv1.Validation, len(exprs))
	for i, e := range exprs {
		out[i] = admissionregistrationv1.Validation{Expression: e}
	}
	return out
}

func TestEvaluate(t *testing.T) {
	tests := map[string]struct {
		spec   Spec
		in     Input
		check  func(t *testing.T, o Outcome)
		errSub string // a compile error expected to contain this
	}{
		"all validations hold": {
			spec: Spec{Validations: validations("object.spec.replicas <= 5", "object.spec.containers.all(c, c.image.startsWith('nginx'))")},
			in:   Input{Object: Normalize(pod(3, nil))},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != -1 || o.Err != nil || o.NotMet {
					t.Fatalf("got %+v, want all held", o)
				}
			},
		},
		"whole numbers are ints: arithmetic stays int": {
			spec: Spec{Validations: validations("object.spec.replicas + 1 == 4", "type(object.spec.replicas) == int")},
			in:   Input{Object: Normalize(pod(3, nil))},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != -1 {
					t.Fatalf("got %+v", o)
				}
			},
		},
		"the first validation that fails stops evaluation, with its messageExpression": {
			spec: Spec{Validations: []admissionregistrationv1.Validation{
				{Expression: "true"},
				{Expression: "object.spec.replicas < 2", MessageExpression: "'too many: ' + string(object.spec.replicas)"},
				{Expression: "1/0 == 1"},
			}},
			in: Input{Object: Normalize(pod(3, nil))},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != 1 || o.Err != nil || !o.HasMessageExpression || o.Message != "too many: 3" {
					t.Fatalf("got %+v", o)
				}
			},
		},
		"a runtime error is the failed validation's error": {
			spec: Spec{Validations: validations("object.spec.missing == 1")},
			in:   Input{Object: Normalize(pod(3, nil))},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != 0 || o.Err == nil || !strings.Contains(o.Err.Error(), "no such key") {
					t.Fatalf("got %+v", o)
				}
			},
		},
		"variables are typed, lazy and may use earlier ones": {
			spec: Spec{
				Variables: []admissionregistrationv1.Variable{
					{Name: "env", Expression: "has(object.metadata.labels) && 'env' in object.metadata.labels ? object.metadata.labels.env : ''"},
					{Name: "prod", Expression: "variables.env == 'prod'"},
					{Name: "broken", Expression: "object.nope.nope"},
				},
				Validations: validations("variables.prod"),
			},
			in: Input{Object: Normalize(pod(1, map[string]any{"env": "prod"}))},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != -1 {
					t.Fatalf("got %+v (an unused broken variable must not matter)", o)
				}
			},
		},
		"a match condition that is false stops everything": {
			spec: Spec{
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "labelled", Expression: "has(object.metadata.labels)"}},
				Validations:     validations("false"),
			},
			in: Input{Object: Normalize(map[string]any{"metadata": map[string]any{"name": "x"}})},
			check: func(t *testing.T, o Outcome) {
				if !o.NotMet || o.Failed != -1 {
					t.Fatalf("got %+v", o)
				}
			},
		},
		"request and namespaceObject are the API server's types": {
			spec: Spec{Validations: validations("request.operation == 'CREATE'", "namespaceObject.metadata.name == 'ns'")},
			in: Input{
				Object:    Normalize(pod(1, nil)),
				Request:   map[string]any{"operation": "CREATE"},
				Namespace: map[string]any{"metadata": map[string]any{"name": "ns"}},
			},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != -1 {
					t.Fatalf("got %+v", o)
				}
			},
		},
		"a validation that is not a bool does not compile": {
			spec:   Spec{Validations: validations("object.spec.replicas")},
			errSub: "validations[0].expression: must evaluate to bool",
		},
		"a syntax error names the expression's place": {
			spec:   Spec{Validations: validations("object.spec.(")},
			errSub: "validations[0].expression: compilation failed",
		},
		"params are not declared without paramKind": {
			spec:   Spec{Validations: validations("params.x == 1")},
			errSub: "undeclared reference to 'params'",
		},
		"kyverno mode: exceptions and libraries": {
			spec: Spec{Mode: ModeKyverno, Validations: validations(
				"object.spec.containers.all(c, c.image in exceptions.allowedImages)",
				"json.unmarshal('{\"a\": 2}').a == 2",
				"sha256('x') == '2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881'",
				"user.parseServiceAccount('system:serviceaccount:ns:sa').name == 'sa'",
				"image('nginx:1.2').registry() == 'docker.io' && image('nginx:1.2').repository() == 'library/nginx' && image('nginx:1.2').tag() == '1.2'",
				"parseImageReference('ghcr.io/a/b@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa').containsDigest() && !isImage('not an image')",
				"image('reg.example.com:5000/app:v1').identifier() == 'v1' && image('reg.example.com:5000/app:v1').registry() == 'reg.example.com:5000'",
				"math.round(2.345, 2) == 2.35 && time.toCron(timestamp('2026-11-24T10:30:00Z')) == '30 10 24 11 2'",
				"time.truncate(timestamp('2026-11-24T10:30:45Z'), duration('1h')) == timestamp('2026-11-24T10:00:00Z') && time.now() > timestamp('2026-01-01T00:00:00Z')",
			)},
			in: Input{Object: Normalize(pod(1, nil)), AllowedImages: []string{"nginx:1.2"}},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != -1 {
					t.Fatalf("got %+v", o)
				}
			},
		},
		"kyverno mode: a cluster call is an error naming it": {
			spec: Spec{Mode: ModeKyverno, Validations: validations("resource.Get('v1', 'configmaps', 'ns', 'x') != null")},
			in:   Input{Object: Normalize(pod(1, nil))},
			check: func(t *testing.T, o Outcome) {
				if o.Failed != 0 || o.Err == nil || !strings.Contains(o.Err.Error(), "resource.Get(v1, configmaps, ns, x)") {
					t.Fatalf("got %+v", o)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := Compile(tc.spec)
			if tc.errSub != "" {
				var ce *CompileError
				if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("compile error = %v, want one containing %q", err, tc.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p.Evaluate(context.Background(), &tc.in))
		})
	}
}

func TestNormalizeCopiesOnlyWhatChanges(t *testing.T) {
	in := map[string]any{"a": "x", "b": []any{"y"}, "n": 2.0, "f": 2.5}
	out := Normalize(in).(map[string]any)
	if _, ok := in["n"].(float64); !ok {
		t.Fatal("the input was modified")
	}
	if out["n"] != int64(2) || out["f"] != 2.5 {
		t.Fatalf("got %v", out)
	}
	unchanged := map[string]any{"a": "x", "l": []any{"y", true}}
	if got := Normalize(unchanged); reflect.ValueOf(got).Pointer() != reflect.ValueOf(unchanged).Pointer() {
		t.Fatal("a value without numbers was copied")
	}
}
