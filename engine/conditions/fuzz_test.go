package conditions

import "testing"

// FuzzEvaluate: any key, operator and value (strings, numbers, lists)
// evaluate or fail with an error; they never panic.
func FuzzEvaluate(f *testing.F) {
	for _, seed := range []struct {
		key, op, value string
		num            float64
	}{
		{"1Gi", "GreaterThan", "1024Mi", 1}, {"*", "AnyIn", "5000-6000", 53}, {"1.2.3", "LessThan", "v1.10", 0},
		{"1h", "DurationLessThan", "", 3600}, {"a,b", "AllNotIn", `["a", 1]`, -1}, {"", "Equals", "?*", 0},
		{"-1!-1", "AnyNotIn", "-1!-1", -1}, {"1e400", "GreaterThanOrEquals", "NaN", 1e308},
	} {
		f.Add(seed.key, seed.op, seed.value, seed.num)
	}
	f.Fuzz(func(t *testing.T, key, op, value string, num float64) {
		for _, k := range []any{key, num, []any{key, num}, nil} {
			for _, v := range []any{value, num, []any{value, num}, nil} {
				_, _ = Evaluate(k, op, v)
				for _, name := range []string{"Equals", "NotEquals", "AnyIn", "AllIn", "AnyNotIn", "AllNotIn",
					"GreaterThan", "LessThanOrEquals", "DurationGreaterThan"} {
					_, _ = Evaluate(k, name, v)
				}
			}
		}
	})
}
