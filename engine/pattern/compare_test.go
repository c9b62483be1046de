package pattern

import (
	"strings"
	"testing"
	"time"
)

func TestMatchValueBoundsQuantities(t *testing.T) {
	tests := map[string]struct {
		value, pattern any
		want           bool
	}{
		"a huge exponent in the resource is not a quantity": {"1e999999999", ">5", false},
		"a huge exponent in the pattern is not a quantity":  {"5", "<1e999999999", false},
		"a huge signed exponent is not a quantity":          {"1E+999999999", "1-10", false},
		"an exponent without mantissa is not a quantity":    {"e999999999", ">5", false},
		"a negative huge exponent is not a quantity":        {".e-999999", "<5", false},
		"a twenty-digit exponent is not a quantity":         {"1e99999999999999999999", ">5", false},
		"a large but sane exponent is still a quantity":     {"1e300", ">1e299", true},
		"an overlong number is not a quantity":              {strings.Repeat("9", 100), ">5", false},
		"an exa suffix is not mistaken for an exponent":     {"2E", ">1E", true},
		"a number against a huge-exponent pattern is safe":  {int64(5), "<1e999999999", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			done := make(chan bool, 1)
			go func() { done <- MatchValue(tc.value, tc.pattern) }()
			select {
			case got := <-done:
				if got != tc.want {
					t.Errorf("MatchValue(%v, %v) = %v, want %v", tc.value, tc.pattern, got, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("MatchValue(%v, %v) did not return within 5s", tc.value, tc.pattern)
			}
		})
	}
}

func TestParseSemver(t *testing.T) {
	tests := map[string]struct {
		a, b string
		want int
		ok   bool
	}{
		"equal versions":                    {"1.2.3", "1.2.3", 0, true},
		"minor versions compare as numbers": {"1.10.0", "1.9.0", 1, true},
		"a v prefix is ignored":             {"v1.2.3", "1.2.3", 0, true},
		"build metadata is ignored":         {"1.2.3+abc", "1.2.3", 0, true},
		"a release is above its pre-release": {
			"1.0.0", "1.0.0-alpha", 1, true,
		},
		"numeric identifiers rank below alphanumeric ones": {"1.0.0-1", "1.0.0-alpha", -1, true},
		"a longer pre-release ranks higher":                {"1.0.0-alpha.1", "1.0.0-alpha", 1, true},
		"two components are not a version":                 {"1.2", "1.2.0", 0, false},
		"letters are not a version":                        {"a.b.c", "1.2.3", 0, false},
		"an empty pre-release is not a version":            {"1.2.3-", "1.2.3", 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, okA := parseSemver(tc.a)
			b, okB := parseSemver(tc.b)
			if ok := okA && okB; ok != tc.ok {
				t.Fatalf("parseSemver(%q) and parseSemver(%q) ok = %v, want %v", tc.a, tc.b, ok, tc.ok)
			}
			if !tc.ok {
				return
			}
			if got := a.cmp(b); got != tc.want {
				t.Errorf("cmp(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
