package pattern

import (
	"github.com/tally-dev/tally/engine/wildcard"

	"strings"
)

// operator is the comparison a condition of a string pattern asks for.
type operator uint8

const (
	opEqual operator = iota
	opNotEqual
	opMore
	opMoreEqual
	opLess
	opLessEqual
	opInRange
	opNotInRange
)

// MatchValue reports whether one scalar value satisfies one scalar pattern
// value. value and pattern use the JSON data model (string, bool, nil, and
// numbers as float64, int64, int or json.Number, among others).
//
// A string pattern is a '|'-separated list of alternatives, each a
// '&'-separated list of conditions; a condition may start with an operator
// (">=", "<=", ">", "<", "!"), be a range ("1-10", "1Gi!-2Gi"), or be a
// plain value with wildcards ('*', '?'). Operands that are numbers,
// Kubernetes quantities or durations are compared by magnitude; ordering
// operators also compare semantic versions.
//
// A bool pattern matches only the same bool, a number pattern matches an equal
// number or a string holding one, and a nil pattern matches a missing value,
// false, zero or the empty string. Maps and lists are not scalar patterns and
// never match; as a value, they match only the pattern "*".
func MatchValue(value, pattern any) bool {
	switch p := pattern.(type) {
	case string:
		return matchString(value, p)
	case nil:
		return isZeroScalar(value)
	case bool:
		v, ok := value.(bool)
		return ok && v == p
	}
	if pn, ok := toNumber(pattern); ok {
		return matchNumber(value, pn)
	}
	return false
}

// matchString matches value against a string pattern with alternatives.
func matchString(value any, p string) bool {
	if p == "*" {
		return value != nil
	}
	if s, ok := value.(string); ok && s == p {
		return true
	}
	for rest := p; ; {
		alt, tail, more := strings.Cut(rest, "|")
		if matchAll(value, alt) {
			return true
		}
		if !more {
			return false
		}
		rest = tail
	}
}

// matchAll reports whether value satisfies every '&'-separated condition.
func matchAll(value any, alt string) bool {
	for rest := alt; ; {
		cond, tail, more := strings.Cut(rest, "&")
		if !matchCondition(value, strings.TrimSpace(cond)) {
			return false
		}
		if !more {
			return true
		}
		rest = tail
	}
}

// matchCondition matches value against one condition (no '|' or '&').
func matchCondition(value any, cond string) bool {
	op, a, b := parseCondition(cond)
	switch op {
	case opEqual:
		return equalOperand(value, a)
	case opNotEqual:
		return isScalar(value) && !equalOperand(value, a)
	case opInRange, opNotInRange:
		lo, ok := compareOperand(value, a, false)
		if !ok {
			return false
		}
		hi, ok := compareOperand(value, b, false)
		if !ok {
			return false
		}
		if op == opInRange {
			return lo >= 0 && hi <= 0
		}
		return lo < 0 || hi > 0
	}
	c, ok := compareOperand(value, a, true)
	if !ok {
		return false
	}
	switch op {
	case opMore:
		return c > 0
	case opMoreEqual:
		return c >= 0
	case opLess:
		return c < 0
	default: // opLessEqual
		return c <= 0
	}
}

// parseCondition splits a condition into its operator and operands; b is set
// only for ranges. Like Kyverno, a condition shorter than two characters is
// always a plain value.
func parseCondition(cond string) (op operator, a, b string) {
	if len(cond) < 2 {
		return opEqual, cond, ""
	}
	switch {
	case strings.HasPrefix(cond, ">="):
		return opMoreEqual, strings.TrimSpace(cond[2:]), ""
	case strings.HasPrefix(cond, "<="):
		return opLessEqual, strings.TrimSpace(cond[2:]), ""
	case cond[0] == '>':
		return opMore, strings.TrimSpace(cond[1:]), ""
	case cond[0] == '<':
		return opLess, strings.TrimSpace(cond[1:]), ""
	case cond[0] == '!':
		return opNotEqual, strings.TrimSpace(cond[1:]), ""
	}
	if lo, hi, negated, ok := splitRange(cond); ok {
		if negated {
			return opNotInRange, lo, hi
		}
		return opInRange, lo, hi
	}
	return opEqual, cond, ""
}

// splitRange recognises "a-b" and "a!-b" where a and b are numbers with an
// optional sign, fraction and unit suffix ("-10--8", "+2-+4", "100Mi!-1Gi",
// "1h-2h").
func splitRange(s string) (lo, hi string, negated, ok bool) {
	n := scanBound(s)
	if n == 0 {
		return "", "", false, false
	}
	rest := s[n:]
	switch {
	case strings.HasPrefix(rest, "!-"):
		negated = true
		rest = rest[2:]
	case strings.HasPrefix(rest, "-"):
		rest = rest[1:]
	default:
		return "", "", false, false
	}
	if m := scanBound(rest); m == 0 || m != len(rest) {
		return "", "", false, false
	}
	return s[:n], rest, negated, true
}

// scanBound returns the length of the range bound at the start of s, or 0.
func scanBound(s string) int {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	start := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == start {
		return 0
	}
	if i+1 < len(s) && s[i] == '.' && isDigit(s[i+1]) {
		i += 2
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	for i < len(s) && isLetter(s[i]) {
		i++
	}
	return i
}

// equalOperand reports whether value equals one operand, comparing numbers,
// quantities and durations by magnitude and everything else as text with
// wildcards.
func equalOperand(value any, a string) bool {
	if a == "*" {
		return value != nil
	}
	switch value.(type) {
	case nil:
		// The documented meaning of an empty pattern: no value at all.
		return a == ""
	case map[string]any, []any:
		return false
	}
	if looksNumeric(a) {
		if c, ok := compareOperand(value, a, false); ok {
			return c == 0
		}
	}
	s, ok := scalarString(value)
	return ok && wildcard.Match(a, s)
}

// isScalar reports whether v is a present, non-composite value.
func isScalar(v any) bool {
	switch v.(type) {
	case nil, map[string]any, []any:
		return false
	}
	return true
}

// isZeroScalar reports whether v is what a nil pattern accepts.
func isZeroScalar(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case bool:
		return !t
	case string:
		return t == ""
	}
	if n, ok := toNumber(v); ok {
		return n.isZero()
	}
	return false
}

// matchNumber matches value against a number pattern.
func matchNumber(value any, p number) bool {
	if s, ok := value.(string); ok {
		n, ok := parseNumber(s)
		return ok && n.equal(p)
	}
	n, ok := toNumber(value)
	return ok && n.equal(p)
}

// looksNumeric reports whether s starts like a number: a digit, or a sign or
// dot followed by a digit.
func looksNumeric(s string) bool {
	if s == "" {
		return false
	}
	if isDigit(s[0]) {
		return true
	}
	if len(s) > 1 && (s[0] == '+' || s[0] == '-' || s[0] == '.') {
		return isDigit(s[1]) || (s[1] == '.' && len(s) > 2 && isDigit(s[2]))
	}
	return false
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }
