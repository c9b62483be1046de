package conditions

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var data = map[string]any{
	"request": map[string]any{
		"operation": "CREATE",
		"object": map[string]any{
			"metadata": map[string]any{"name": "web", "labels": map[string]any{"app": "shop"}},
			"spec":     map[string]any{"replicas": int64(3)},
		},
		"oldObject": nil,
	},
}

func conds(t *testing.T, y string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAnyAll(t *testing.T) {
	tests := map[string]struct {
		conds   string
		want    bool
		wantMsg string
		wantErr string // a part of the error, "" for none
	}{
		"all conditions hold": {conds: `
all:
- {key: "{{ request.operation }}", operator: Equals, value: CREATE}
- {key: "{{ request.object.spec.replicas }}", operator: GreaterThan, value: 2}`, want: true},
		"one of all fails, with its message": {conds: `
all:
- {key: "{{ request.operation }}", operator: Equals, value: CREATE}
- {key: "{{ request.object.metadata.name }}", operator: Equals, value: api, message: "name is {{ request.object.metadata.name }}"}`, want: false, wantMsg: "name is web"},
		"one of any holds": {conds: `
any:
- {key: "{{ request.operation }}", operator: Equals, value: DELETE}
- {key: "{{ request.operation }}", operator: Equals, value: CREATE}`, want: true},
		"none of any holds, with their messages": {conds: `
any:
- {key: a, operator: Equals, value: b, message: first}
- {key: a, operator: Equals, value: c, message: second}`, want: false, wantMsg: "first; second"},
		"any and all must both hold": {conds: `
any:
- {key: a, operator: Equals, value: a}
all:
- {key: a, operator: Equals, value: b}`, want: false},
		"an empty any never holds": {conds: `{any: []}`, want: false},
		"an empty all holds":       {conds: `{all: []}`, want: true},
		"a plain list must all hold": {conds: `
- {key: a, operator: Equals, value: a}
- {key: b, operator: Equals, value: c}`, want: false},
		"a list of groups": {conds: `
- any: [{key: a, operator: Equals, value: a}]
- all: [{key: b, operator: Equals, value: b}]`, want: true},
		"a missing field is an error, as Kyverno's Unknown key": {conds: `
all:
- {key: "{{ request.object.metadata.labels.tier }}", operator: NotEquals, value: gold}`, wantErr: `failed to substitute variables in condition key: failed to resolve request.object.metadata.labels.tier at path : JMESPath query failed: Unknown key "tier" in path`},
		"a missing field in a value is an error too": {conds: `
any:
- {key: gold, operator: Equals, value: "{{ request.object.metadata.labels.tier }}"}`, wantErr: "failed to substitute variables in condition value: "},
		"a function given null is an error": {conds: `
any:
- {key: "{{ contains(request.oldObject, 'a') }}", operator: Equals, value: true}`, wantErr: "JMESPath query failed: "},
		"a function given malformed input is an error": {conds: `
any:
- {key: "{{ parse_json(request.object.metadata.name) }}", operator: Equals, value: web}`, wantErr: "JMESPath query failed: "},
		"a malformed certificate is an error": {conds: `
any:
- {key: "{{ x509_decode(request.object.metadata.name).NotAfter }}", operator: Equals, value: x}`, wantErr: "JMESPath query failed: "},
		"malformed YAML is an error": {conds: `
any:
- {key: "{{ parse_yaml('a: [') }}", operator: Equals, value: x}`, wantErr: "JMESPath query failed: "},
		"a missing field with a default is the default": {conds: `
any:
- {key: "{{ request.object.metadata.labels.tier || '' }}", operator: Equals, value: ""}`, want: true},
		"a null field does not compare": {conds: `
any:
- {key: "{{ request.oldObject }}", operator: NotEquals, value: x}`, want: false},
		"the default value of a missing field": {conds: `
all:
- {key: "{{ request.object.metadata.labels.tier || 'bronze' }}", operator: AnyIn, value: [bronze, silver]}`, want: true},
		"variables in values": {conds: `
all:
- {key: shop, operator: Equals, value: "{{ request.object.metadata.labels.app }}"}`, want: true},
		"an evaluation stops at the first any that holds": {conds: `
any:
- {key: a, operator: Equals, value: a}
- {key: a, operator: Bogus, value: a}`, want: true},
		"the messages of the conditions that held are returned": {conds: `
any:
- {key: a, operator: Equals, value: b, message: nope}
- {key: a, operator: Equals, value: a, message: holds}
all:
- {key: b, operator: Equals, value: b, message: also}`, want: true, wantMsg: "holds; also"},
		"a list joins the messages of what held with a semicolon": {conds: `
- {key: a, operator: Equals, value: a, message: one}
- {key: b, operator: Equals, value: b, message: two}`, want: true, wantMsg: "one;two"},
		"a list stops at its first condition that does not hold, with its message": {conds: `
- {key: a, operator: Equals, value: a, message: one}
- {key: b, operator: Equals, value: c, message: two}
- {key: "{{ request.object.nothere }}", operator: Equals, value: c}`, want: false, wantMsg: "two"},
		"an error in all is an error even when any does not hold": {conds: `
any:
- {key: a, operator: Equals, value: b}
all:
- {key: "{{ request.object.nothere }}", operator: Equals, value: c}`, wantErr: "Unknown key"},
		"no conditions hold":                            {conds: `null`, want: true},
		"an unknown operator is an error":               {conds: `{all: [{key: a, operator: Bogus, value: a}]}`, wantErr: "unknown"},
		"a missing operator is an error":                {conds: `{all: [{key: a, value: a}]}`, wantErr: "no operator"},
		"a malformed expression is an error":            {conds: `{all: [{key: "{{ request.[ }}", operator: Equals, value: a}]}`, wantErr: "request.["},
		"an unknown group field is an error":            {conds: `{some: []}`, wantErr: "neither"},
		"a condition that is not an object is an error": {conds: `[a]`, wantErr: "object"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, msg, err := AnyAll(conds(t, tc.conds), data, Preconditions)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || msg != tc.wantMsg {
				t.Errorf("got %v %q, want %v %q", got, msg, tc.want, tc.wantMsg)
			}
		})
	}
}

func TestDenyModeResolvesLikePreconditions(t *testing.T) {
	c := conds(t, `{any: [{key: "{{ request.object.metadata.labels.env || 'dev' }}", operator: NotEquals, value: prod}]}`)
	for _, mode := range []Mode{Preconditions, Deny} {
		if ok, _, err := AnyAll(c, data, mode); err != nil || !ok {
			t.Errorf("%s: got %v, %v; want true", mode, ok, err)
		}
	}
}
