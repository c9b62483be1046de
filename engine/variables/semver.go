package variables

import (
	"fmt"
	"strconv"
	"strings"
)

// version is a semantic version (https://semver.org); build metadata is
// ignored.
type version struct {
	parts [3]uint64
	pre   []string
}

// parseVersion reads "1.2.3", "v1.2.3-rc.1+build". Tolerant parsing also
// accepts "1.2" and "1" (missing parts are 0) and surrounding space.
func parseVersion(s string, tolerant bool) (version, error) {
	var v version
	orig := s
	if tolerant {
		s = strings.TrimSpace(s)
	}
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexByte(s, '-'); i >= 0 {
		if i == len(s)-1 {
			return v, fmt.Errorf("%q is not a semantic version", orig)
		}
		v.pre = strings.Split(s[i+1:], ".")
		s = s[:i]
	}
	nums := strings.Split(s, ".")
	if len(nums) > 3 || (!tolerant && len(nums) != 3) {
		return v, fmt.Errorf("%q is not a semantic version", orig)
	}
	for i, n := range nums {
		x, err := strconv.ParseUint(n, 10, 64)
		if err != nil || (len(n) > 1 && n[0] == '0' && !tolerant) {
			return v, fmt.Errorf("%q is not a semantic version", orig)
		}
		v.parts[i] = x
	}
	return v, nil
}

func (v version) compare(w version) int {
	for i := range v.parts {
		if v.parts[i] != w.parts[i] {
			if v.parts[i] < w.parts[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(v.pre) == 0 && len(w.pre) == 0:
		return 0
	case len(v.pre) == 0:
		return 1 // a release is above its pre-releases
	case len(w.pre) == 0:
		return -1
	}
	for i := 0; i < len(v.pre) && i < len(w.pre); i++ {
		if c := comparePre(v.pre[i], w.pre[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(v.pre) < len(w.pre):
		return -1
	case len(v.pre) > len(w.pre):
		return 1
	}
	return 0
}

func comparePre(a, b string) int {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	case errA == nil:
		return -1 // numeric identifiers sort first
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// CompareVersions orders two versions read tolerantly ("v1.2", "1.2.3"):
// -1, 0 or 1.
func CompareVersions(a, b string) (int, error) {
	x, err := parseVersion(a, true)
	if err != nil {
		return 0, err
	}
	y, err := parseVersion(b, true)
	if err != nil {
		return 0, err
	}
	return x.compare(y), nil
}

// jpSemverCompare: semver_compare(version, range). A range is alternatives
// joined by "||", each a space-separated list of comparisons that must all
// hold: an operator (=, ==, !, !=, >, >=, <, <=; none means =) and a
// version in which "x", "X" or "*" (or a missing part) is a wildcard:
// ">=4.1.x" is ">=4.1.0", "!4.x.x" is "not 4.*", "1.2.x" is "1.2.*".
func jpSemverCompare(a []any) (any, error) {
	v, err := parseVersion(str(a[0]), false)
	if err != nil {
		return nil, fmt.Errorf("semver_compare: %w", err)
	}
	for _, alt := range strings.Split(str(a[1]), "||") {
		fields := strings.Fields(alt)
		if len(fields) == 0 {
			return nil, fmt.Errorf("semver_compare: empty range in %q", str(a[1]))
		}
		all := true
		for i := 0; i < len(fields); i++ {
			c := fields[i]
			if isOperator(c) && i+1 < len(fields) { // "> 1.2.3": the operator stands apart
				c += fields[i+1]
				i++
			}
			ok, err := matchComparison(v, c)
			if err != nil {
				return nil, fmt.Errorf("semver_compare: %w", err)
			}
			all = all && ok
		}
		if all {
			return true, nil
		}
	}
	return false, nil
}

var semverOperators = []string{">=", "<=", "!=", "==", ">", "<", "!", "="}

func isOperator(s string) bool {
	for _, op := range semverOperators {
		if s == op {
			return true
		}
	}
	return false
}

func matchComparison(v version, c string) (bool, error) {
	op := ""
	for _, o := range semverOperators {
		if strings.HasPrefix(c, o) {
			op, c = o, c[len(o):]
			break
		}
	}
	lo, hi, exact, err := parseWildcardVersion(c)
	if err != nil {
		return false, err
	}
	if exact {
		cmp := v.compare(lo)
		switch op {
		case ">":
			return cmp > 0, nil
		case ">=":
			return cmp >= 0, nil
		case "<":
			return cmp < 0, nil
		case "<=":
			return cmp <= 0, nil
		case "!", "!=":
			return cmp != 0, nil
		}
		return cmp == 0, nil
	}
	// A wildcard version is the interval [lo, hi).
	in := v.compare(lo) >= 0 && v.compare(hi) < 0
	switch op {
	case ">":
		return v.compare(hi) >= 0, nil
	case ">=":
		return v.compare(lo) >= 0, nil
	case "<":
		return v.compare(lo) < 0, nil
	case "<=":
		return v.compare(hi) < 0, nil
	case "!", "!=":
		return !in, nil
	}
	return in, nil
}

// parseWildcardVersion reads "1.2.3" (exact) or "1.2.x", "1.x", "1" as the
// interval [lo, hi) of the versions they cover.
func parseWildcardVersion(s string) (lo, hi version, exact bool, err error) {
	core := s
	if i := strings.IndexAny(core, "-+"); i >= 0 {
		core = core[:i]
	}
	nums := strings.Split(strings.TrimPrefix(core, "v"), ".")
	if len(nums) > 3 || core == "" {
		return lo, hi, false, fmt.Errorf("%q is not a version", s)
	}
	wild := -1
	for i := 0; i < 3; i++ {
		if i >= len(nums) || nums[i] == "x" || nums[i] == "X" || nums[i] == "*" {
			if wild < 0 {
				wild = i
			}
			continue
		}
		if wild >= 0 {
			return lo, hi, false, fmt.Errorf("%q has a number after a wildcard", s)
		}
	}
	if wild < 0 {
		lo, err = parseVersion(s, false)
		return lo, lo, true, err
	}
	if wild == 0 {
		return version{}, version{parts: [3]uint64{1 << 63}}, false, nil // any version
	}
	for i := 0; i < wild; i++ {
		n, err := strconv.ParseUint(nums[i], 10, 64)
		if err != nil {
			return lo, hi, false, fmt.Errorf("%q is not a version", s)
		}
		lo.parts[i] = n
	}
	hi = lo
	hi.parts[wild-1]++
	return lo, hi, false, nil
}
