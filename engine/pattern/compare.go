package pattern

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// number is a JSON number kept exact when it is an integer.
type number struct {
	i     int64
	f     float64
	isInt bool
}

func intNumber(i int64) number { return number{i: i, f: float64(i), isInt: true} }

func floatNumber(f float64) number {
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		return number{i: int64(f), f: f, isInt: true}
	}
	return number{f: f}
}

// toNumber converts any Go number (and json.Number) to a number.
func toNumber(v any) (number, bool) {
	switch n := v.(type) {
	case float64:
		return floatNumber(n), !math.IsNaN(n)
	case int64:
		return intNumber(n), true
	case int:
		return intNumber(int64(n)), true
	case int32:
		return intNumber(int64(n)), true
	case int16:
		return intNumber(int64(n)), true
	case int8:
		return intNumber(int64(n)), true
	case uint:
		return uintNumber(uint64(n)), true
	case uint64:
		return uintNumber(n), true
	case uint32:
		return intNumber(int64(n)), true
	case uint16:
		return intNumber(int64(n)), true
	case uint8:
		return intNumber(int64(n)), true
	case float32:
		return floatNumber(float64(n)), !math.IsNaN(float64(n))
	case json.Number:
		return parseNumber(string(n))
	}
	return number{}, false
}

func uintNumber(u uint64) number {
	if u > math.MaxInt64 {
		return number{f: float64(u)}
	}
	return intNumber(int64(u))
}

// parseNumber parses a decimal integer or float. It checks the syntax first
// so that the common non-number case costs no error allocation.
func parseNumber(s string) (number, bool) {
	if s == "" {
		return number{}, false
	}
	isInt := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isDigit(c):
		case (c == '+' || c == '-') && (i == 0 || s[i-1] == 'e' || s[i-1] == 'E'):
		case c == '.' || c == 'e' || c == 'E':
			isInt = false
		default:
			return number{}, false
		}
	}
	if isInt {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return intNumber(i), true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return number{}, false
	}
	return floatNumber(f), true
}

func (n number) isZero() bool { return n.f == 0 }

func (n number) equal(o number) bool { return n.cmp(o) == 0 }

// cmp orders two numbers, exactly when both are integers.
func (n number) cmp(o number) int {
	if n.isInt && o.isInt {
		return cmpOrdered(n.i, o.i)
	}
	return cmpOrdered(n.f, o.f)
}

func cmpOrdered[T int64 | uint64 | float64 | time.Duration](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareOperand orders value against operand a (the sign of value-a) when
// both are durations, numbers or Kubernetes quantities, or, if semver is set,
// semantic versions. ok is false when they are not comparable.
func compareOperand(value any, a string, semver bool) (c int, ok bool) {
	vs, isString := value.(string)
	if isString && isDurationLike(a) && isDurationLike(vs) {
		pd, err1 := time.ParseDuration(a)
		vd, err2 := time.ParseDuration(vs)
		if err1 == nil && err2 == nil {
			return cmpOrdered(vd, pd), true
		}
	}
	if q, ok := parseQuantity(a); ok {
		if isString {
			vq, ok := parseQuantity(strings.TrimSpace(vs))
			if !ok {
				return 0, false
			}
			return vq.Cmp(q), true
		}
		n, ok := toNumber(value)
		if !ok {
			return 0, false
		}
		return cmpNumberQuantity(n, q), true
	}
	if semver && isString {
		if pv, ok := parseSemver(a); ok {
			if vv, ok := parseSemver(vs); ok {
				return vv.cmp(pv), true
			}
		}
	}
	return 0, false
}

// maxQuantityLen and maxQuantityExponent bound the quantities compared:
// comparing quantities costs time that grows fast with their exponents
// ("1e999999999" would take hours), and no Kubernetes quantity comes close.
const (
	maxQuantityLen      = 64
	maxQuantityExponent = 308
)

// parseQuantity parses a Kubernetes quantity within the bounds above.
func parseQuantity(s string) (resource.Quantity, bool) {
	if len(s) > maxQuantityLen {
		return resource.Quantity{}, false
	}
	for i := 0; i < len(s)-1; i++ {
		if s[i] != 'e' && s[i] != 'E' {
			continue
		}
		exp := s[i+1:]
		if exp[0] == '+' || exp[0] == '-' {
			exp = exp[1:]
		}
		if n, ok := parseUint(exp); (ok && n > maxQuantityExponent) || (!ok && allDigits(exp)) {
			return resource.Quantity{}, false
		}
	}
	q, err := resource.ParseQuantity(s)
	return q, err == nil
}

// cmpNumberQuantity orders a number against a quantity.
func cmpNumberQuantity(n number, q resource.Quantity) int {
	if n.isInt {
		return -q.CmpInt64(n.i)
	}
	return cmpOrdered(n.f, q.AsApproximateFloat64())
}

// isDurationLike is a cheap pre-check for time.ParseDuration: a number
// followed by Go duration units ("1h30m", "250ms", "-1.5h").
func isDurationLike(s string) bool {
	if len(s) < 2 || !looksNumeric(s) {
		return false
	}
	switch s[len(s)-1] {
	case 's', 'm', 'h':
	default:
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isDigit(c), c == '.', c == '+', c == '-':
		case c == 'n', c == 'u', c == 'm', c == 's', c == 'h':
		case c >= 0x80: // µ
		default:
			return false
		}
	}
	return true
}

// scalarString renders a scalar value as text for wildcard comparison.
func scalarString(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return t, true
	case bool:
		return strconv.FormatBool(t), true
	case json.Number:
		return string(t), true
	}
	n, ok := toNumber(v)
	if !ok {
		return "", false
	}
	if n.isInt {
		return strconv.FormatInt(n.i, 10), true
	}
	if math.IsInf(n.f, 0) || math.Abs(n.f) >= 1e21 {
		return strconv.FormatFloat(n.f, 'g', -1, 64), true
	}
	return strconv.FormatFloat(n.f, 'f', -1, 64), true
}

// semver is a parsed semantic version; pre is the pre-release part, if any.
type semver struct {
	major, minor, patch uint64
	pre                 string
}

// parseSemver parses "MAJOR.MINOR.PATCH[-pre][+build]" with an optional "v".
func parseSemver(s string) (semver, bool) {
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	var v semver
	core := s
	if i := strings.IndexByte(s, '-'); i >= 0 {
		core, v.pre = s[:i], s[i+1:]
		if v.pre == "" {
			return semver{}, false
		}
	}
	parts := [3]*uint64{&v.major, &v.minor, &v.patch}
	for i, p := range parts {
		var field string
		if i < 2 {
			var ok bool
			field, core, ok = strings.Cut(core, ".")
			if !ok {
				return semver{}, false
			}
		} else {
			field = core
		}
		n, ok := parseUint(field)
		if !ok {
			return semver{}, false
		}
		*p = n
	}
	return v, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

func parseUint(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n, true
}

func (v semver) cmp(o semver) int {
	if c := cmpOrdered(v.major, o.major); c != 0 {
		return c
	}
	if c := cmpOrdered(v.minor, o.minor); c != 0 {
		return c
	}
	if c := cmpOrdered(v.patch, o.patch); c != 0 {
		return c
	}
	switch {
	case v.pre == o.pre:
		return 0
	case v.pre == "":
		return 1 // a release ranks above its pre-releases
	case o.pre == "":
		return -1
	}
	a, b := v.pre, o.pre
	for {
		x, restA, moreA := strings.Cut(a, ".")
		y, restB, moreB := strings.Cut(b, ".")
		if c := cmpIdentifier(x, y); c != 0 {
			return c
		}
		switch {
		case !moreA && !moreB:
			return 0
		case !moreA:
			return -1
		case !moreB:
			return 1
		}
		a, b = restA, restB
	}
}

// cmpIdentifier orders pre-release identifiers: numeric ones numerically and
// below alphanumeric ones, which are ordered as text.
func cmpIdentifier(x, y string) int {
	nx, okx := parseUint(x)
	ny, oky := parseUint(y)
	switch {
	case okx && oky:
		return cmpOrdered(nx, ny)
	case okx:
		return -1
	case oky:
		return 1
	}
	return strings.Compare(x, y)
}
