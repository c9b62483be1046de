package pattern

import "testing"

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		pattern string
		wantErr bool
	}{
		"a Pod Security pattern is fine": {
			pattern: `{spec: {=(securityContext): {=(runAsUser): ">0"}, containers: [{=(securityContext): {=(runAsUser): ">0"}}]}}`,
		},
		"operators, ranges and alternatives are fine": {pattern: `{a: "1-10 | >=20 & !25", b: "*", c: null, d: 1.5, e: true}`},
		"an empty list is rejected":                   {pattern: `{spec: {containers: []}}`, wantErr: true},
		"an existence anchor on an object is rejected": {
			pattern: `{spec: {^(containers): {name: a}}}`, wantErr: true,
		},
		"an operator without operand is accepted, as Kyverno accepts it": {pattern: `{spec: {replicas: ">= ", name: "<", team: "!= | >="}}`},
		"a lone bang is a plain value, as in Kyverno":                    {pattern: `{a: "x | !"}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := Check(fromYAML(t, tc.pattern))
			if (err != nil) != tc.wantErr {
				t.Errorf("Check() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
	t.Run("a Go value outside the JSON model is rejected", func(t *testing.T) {
		if err := Check(map[string]any{"a": struct{}{}}); err == nil {
			t.Error("Check() = nil, want an error")
		}
	})
}
