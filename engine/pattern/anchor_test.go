package pattern

import "testing"

func TestParseKey(t *testing.T) {
	tests := map[string]struct {
		key      string
		want     anchor
		wantName string
	}{
		"a plain key":               {"image", anchorNone, "image"},
		"a conditional anchor":      {"(image)", anchorCondition, "image"},
		"an equality anchor":        {"=(image)", anchorEquality, "image"},
		"a negation anchor":         {"X(hostPath)", anchorNegation, "hostPath"},
		"an existence anchor":       {"^(containers)", anchorExistence, "containers"},
		"a global anchor":           {"<(image)", anchorGlobal, "image"},
		"an add anchor":             {"+(team)", anchorAddIfAbsent, "team"},
		"empty parentheses":         {"()", anchorNone, "()"},
		"an anchor with empty name": {"=()", anchorNone, "=()"},
		"an unknown modifier":       {"Y(key)", anchorNone, "Y(key)"},
		"a key ending in a paren":   {"f(x)", anchorNone, "f(x)"},
		"an anchor around a wildcard key": {
			"X(fluxcd.io/*)", anchorNegation, "fluxcd.io/*",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, n := parseKey(tc.key)
			if a != tc.want || n != tc.wantName {
				t.Errorf("parseKey(%q) = %v, %q; want %v, %q", tc.key, a, n, tc.want, tc.wantName)
			}
		})
	}
}
