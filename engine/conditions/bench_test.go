package conditions

import "testing"

func BenchmarkAnyAll(b *testing.B) {
	c := map[string]any{"all": []any{
		map[string]any{"key": "{{ request.operation }}", "operator": "AnyIn", "value": []any{"CREATE", "UPDATE"}},
		map[string]any{"key": "{{ request.object.spec.replicas }}", "operator": "GreaterThan", "value": float64(2)},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if ok, _, err := AnyAll(c, data, Deny); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkEvaluate(b *testing.B) {
	cases := map[string]opCase{
		"Equals with a wildcard": {"api.mycompany.com", "Equals", "*.mycompany.com", true},
		"GreaterThan quantities": {"1536Mi", "GreaterThan", "1Gi", true},
		"AnyNotIn a range":       {[]any{float64(53), float64(5001)}, "AnyNotIn", "5000-6000", true},
	}
	for name, tc := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := Evaluate(tc.key, tc.op, tc.value); err != nil || ok != tc.want {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
