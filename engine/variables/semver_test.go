package variables

import "testing"

func TestSemverCompare(t *testing.T) {
	runQueries(t, map[string]queryCase{
		"equal versions":                {expr: "semver_compare('1.2.3', '1.2.3')", want: true},
		"different versions":            {expr: "semver_compare('1.2.3', '1.2.4')", want: false},
		"a wildcard lower bound":        {expr: "semver_compare('4.1.3', '>=4.1.x')", want: true},
		"a negated wildcard":            {expr: "semver_compare('4.1.3', '!4.x.x')", want: false},
		"a negated other major":         {expr: "semver_compare('4.1.3', '!5.x.x')", want: true},
		"an AND range":                  {expr: "semver_compare('1.8.6', '>1.0.0 <2.0.0')", want: true},
		"an OR range":                   {expr: "semver_compare('2.1.5', '<2.0.0 || >=3.0.0')", want: false},
		"an OR range that holds":        {expr: "semver_compare('3.1.5', '<2.0.0 || >=3.0.0')", want: true},
		"above a wildcard":              {expr: "semver_compare('4.2.0', '>4.1.x')", want: true},
		"not above a wildcard":          {expr: "semver_compare('4.1.9', '>4.1.x')", want: false},
		"at most a wildcard":            {expr: "semver_compare('4.1.9', '<=4.1.x')", want: true},
		"a pre-release is lower":        {expr: "semver_compare('1.0.0-rc.1', '<1.0.0')", want: true},
		"pre-releases compare by parts": {expr: "semver_compare('1.0.0-rc.10', '>1.0.0-rc.9')", want: true},
		"a leading v":                   {expr: "semver_compare('v1.2.3', '1.2.3')", want: true},
		"an operator standing apart":    {expr: "semver_compare('1.2.3', '>= 1.2.0')", want: true},
		"not a version fails":           {expr: "semver_compare('x', '1.0.0')", wantErr: true},
		"a partial version fails":       {expr: "semver_compare('1.2', '1.2.0')", wantErr: true},
		"a bad range fails":             {expr: "semver_compare('1.2.3', '>=a.b')", wantErr: true},
	})
}

func TestCompareVersions(t *testing.T) {
	tests := map[string]struct {
		a, b string
		want int
	}{
		"minor versions compare as numbers": {a: "1.10", b: "1.9", want: 1},
		"a missing patch is zero":           {a: "v1.2", b: "1.2.0", want: 0},
		"a lower patch":                     {a: "1.2.3", b: "1.2.4", want: -1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := CompareVersions(tc.a, tc.b)
			if err != nil || got != tc.want {
				t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
			}
		})
	}
}
