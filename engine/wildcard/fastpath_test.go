package wildcard

import "testing"

func TestFastPathWildcardMatch(t *testing.T) {
	tests := map[string]struct {
		pattern, s string
		want       bool
	}{
		"no wildcard compares equal":          {"abc", "abc", true},
		"no wildcard rejects a prefix":        {"abc", "ab", false},
		"a lone star matches empty":           {"*", "", true},
		"stars at both ends":                  {"*b*", "abc", true},
		"backtracking over several stars":     {"a*b*c", "aXbYbZc", true},
		"backtracking fails properly":         {"a*b*c", "aXbYbZ", false},
		"a trailing star after a full match":  {"abc*", "abc", true},
		"question marks count characters":     {"a??d", "abcd", true},
		"question marks reject short strings": {"a??d", "abd", false},
		"stars and question marks together":   {"?*", "x", true},
		"a star never matches a missing char": {"a*?", "a", false},
		"literal characters after a star":     {"*.corp.com", "a.b.corp.com", true},
		"a pathological pattern stays fast":   {"*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Match(tc.pattern, tc.s); got != tc.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
			}
		})
	}
}
