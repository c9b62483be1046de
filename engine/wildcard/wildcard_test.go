package wildcard

import "testing"

func TestWildcardMatch(t *testing.T) {
	tests := map[string]struct {
		pattern, s string
		want       bool
	}{
		"a plain pattern matches itself":         {"web", "web", true},
		"a plain pattern matches nothing else":   {"web", "web2", false},
		"* matches the empty string":             {"*", "", true},
		"* matches anything":                     {"*", "anything/at:all", true},
		"a prefix":                               {"kube-*", "kube-system", true},
		"a suffix":                               {"*-system", "kube-system", true},
		"a suffix that is not there":             {"*-system", "kube-public", false},
		"an infix":                               {"*ub*", "kube-public", true},
		"? matches one character":                {"pod-?", "pod-1", true},
		"? needs a character":                    {"pod-?", "pod-", false},
		"? matches one character only":           {"pod-?", "pod-12", false},
		"? matches one multi-byte character":     {"?", "é", true},
		"?* needs at least one character":        {"?*", "", false},
		"backtracking over several stars":        {"a*b*c", "aXbYbZc", true},
		"backtracking that fails":                {"a*b*c", "aXbYbZ", false},
		"a star then a literal repeated":         {"*ab", "aab", true},
		"an empty pattern matches the empty one": {"", "", true},
		"an empty pattern matches nothing else":  {"", "a", false},
		"trailing stars match the empty rest":    {"web**", "web", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Match(tc.pattern, tc.s); got != tc.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
			}
		})
	}
}
