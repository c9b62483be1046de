package pattern

import (
	"strings"
	"testing"
)

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

func TestCheckKeyRefusesWhatLooksLikeAnAnchorButIsNotOne(t *testing.T) {
	tests := map[string]struct {
		key  string
		want string // "" when the key is fine
	}{
		"a plain key":                       {"image", ""},
		"a well-formed equality anchor":     {"=(name)", ""},
		"every well-formed anchor":          {"^(containers)", ""},
		"a key with parentheses inside":     {"a(b)c", ""},
		"an equality anchor left open":      {"=(name", "no closing parenthesis"},
		"a conditional anchor left open":    {"(image", "no closing parenthesis"},
		"a negation anchor with empty name": {"X()", "empty"},
		"empty parentheses":                 {"()", "empty"},
		"an unknown modifier":               {"Y(key)", "unknown modifier"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckKey(tc.key)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckKey(%q) = %v, want nil", tc.key, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckKey(%q) = %v, want an error saying %q", tc.key, err, tc.want)
			}
		})
	}
}
