package conditions

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/engine/wildcard"
)

// operator is a parsed operator name.
type operator int

const (
	opEquals operator = iota
	opNotEquals
	opIn
	opNotIn
	opAnyIn
	opAllIn
	opAnyNotIn
	opAllNotIn
	opGreaterThan
	opGreaterThanOrEquals
	opLessThan
	opLessThanOrEquals
	opDurationGreaterThan
	opDurationGreaterThanOrEquals
	opDurationLessThan
	opDurationLessThanOrEquals
)

var operatorNames = []struct {
	name string
	op   operator
}{
	{"Equals", opEquals}, {"Equal", opEquals},
	{"NotEquals", opNotEquals}, {"NotEqual", opNotEquals},
	{"In", opIn}, {"NotIn", opNotIn},
	{"AnyIn", opAnyIn}, {"AllIn", opAllIn}, {"AnyNotIn", opAnyNotIn}, {"AllNotIn", opAllNotIn},
	{"GreaterThan", opGreaterThan}, {"GreaterThanOrEquals", opGreaterThanOrEquals},
	{"LessThan", opLessThan}, {"LessThanOrEquals", opLessThanOrEquals},
	{"DurationGreaterThan", opDurationGreaterThan}, {"DurationGreaterThanOrEquals", opDurationGreaterThanOrEquals},
	{"DurationLessThan", opDurationLessThan}, {"DurationLessThanOrEquals", opDurationLessThanOrEquals},
}

func parseOperator(name string) (operator, bool) {
	for _, o := range operatorNames {
		if o.name == name {
			return o.op, true
		}
	}
	for _, o := range operatorNames {
		if strings.EqualFold(o.name, name) {
			return o.op, true
		}
	}
	return 0, false
}

// Evaluate applies one operator to an already substituted key and value.
// Operator names are matched without regard to case; an unknown operator is
// an error naming it.
func Evaluate(key any, operator string, value any) (bool, error) {
	op, ok := parseOperator(operator)
	if !ok {
		return false, fmt.Errorf("unknown condition operator %q", operator)
	}
	switch op {
	case opEquals:
		return equals(key, value) == equal, nil
	case opNotEquals:
		return equals(key, value) == unequal, nil
	case opIn, opAllIn:
		return inSet(key, value, allIn), nil
	case opNotIn, opAnyNotIn:
		return inSet(key, value, anyNotIn), nil
	case opAnyIn:
		return inSet(key, value, anyIn), nil
	case opAllNotIn:
		return inSet(key, value, allNotIn), nil
	case opGreaterThan:
		return compare(key, value, func(c int) bool { return c > 0 }), nil
	case opGreaterThanOrEquals:
		return compare(key, value, func(c int) bool { return c >= 0 }), nil
	case opLessThan:
		return compare(key, value, func(c int) bool { return c < 0 }), nil
	case opLessThanOrEquals:
		return compare(key, value, func(c int) bool { return c <= 0 }), nil
	case opDurationGreaterThan:
		return compareDurations(key, value, func(c int) bool { return c > 0 }), nil
	case opDurationGreaterThanOrEquals:
		return compareDurations(key, value, func(c int) bool { return c >= 0 }), nil
	case opDurationLessThan:
		return compareDurations(key, value, func(c int) bool { return c < 0 }), nil
	case opDurationLessThanOrEquals:
		return compareDurations(key, value, func(c int) bool { return c <= 0 }), nil
	}
	return false, fmt.Errorf("unknown condition operator %q", operator)
}

// equality is how a key compares with a value for Equals and NotEquals.
type equality uint8

const (
	// unequal: NotEquals holds. Values of another kind than the key (a
	// boolean and a string, a string and a list) are unequal, as in Kyverno.
	unequal equality = iota
	// equal: Equals holds.
	equal
	// undecided: neither holds, as Kyverno decides for a null key.
	undecided
)

func eq(b bool) equality {
	if b {
		return equal
	}
	return unequal
}

// equals compares one key with one value.
func equals(key, value any) equality {
	if key == nil {
		return undecided
	}
	if kf, ok := variables.ToFloat(key); ok {
		switch v := value.(type) {
		case string:
			if d, ok := duration(v); ok {
				return eq(kf == d.Seconds())
			}
			vf, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return unequal
			}
			return eq(kf == vf)
		default:
			vf, ok := variables.ToFloat(value)
			return eq(ok && kf == vf)
		}
	}
	switch k := key.(type) {
	case string:
		switch v := value.(type) {
		case string:
			if k == v {
				return equal
			}
			if a, b, ok := durations(k, v); ok {
				return eq(a == b)
			}
			if a, ok := quantity(k); ok {
				// Kyverno: a key that reads as a quantity ("3", "500m")
				// equals only a quantity, never a pattern ("*").
				b, ok := quantity(v)
				return eq(ok && a.Cmp(b) == 0)
			}
			return eq(wildcard.Match(v, k))
		default:
			// A numeric string against a number compares the numbers.
			vf, ok := variables.ToFloat(value)
			if !ok {
				return unequal
			}
			if d, ok := duration(k); ok {
				return eq(d.Seconds() == vf)
			}
			kf, err := strconv.ParseFloat(strings.TrimSpace(k), 64)
			if err != nil {
				return unequal
			}
			return eq(kf == vf)
		}
	case bool:
		v, ok := value.(bool)
		return eq(ok && k == v)
	case map[string]any:
		v, ok := value.(map[string]any)
		return eq(ok && reflect.DeepEqual(variables.Normalize(k), variables.Normalize(v)))
	case []any:
		v, ok := value.([]any)
		return eq(ok && reflect.DeepEqual(variables.Normalize(k), variables.Normalize(v)))
	}
	return unequal
}

// duration reads a Go duration with a unit ("1h", "90s"; "0" too).
func duration(s string) (time.Duration, bool) {
	if s == "" || !hasDigit(s) {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	return d, err == nil
}

func hasDigit(s string) bool {
	return strings.ContainsAny(s, "0123456789")
}

// durations reads two strings as durations.
func durations(a, b string) (time.Duration, time.Duration, bool) {
	x, ok1 := duration(a)
	if !ok1 {
		return 0, 0, false
	}
	y, ok2 := duration(b)
	return x, y, ok2
}

// quantity reads a resource quantity.
func quantity(s string) (resource.Quantity, bool) {
	if s == "" || !hasDigit(s) {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(s)
	return q, err == nil
}

// compare orders key and value for the GreaterThan family, trying in turn:
// numbers (a numeric string reads as a number), durations (a number on one
// side is seconds), quantities, and versions. A string pair that reads as
// both quantities and versions holds if either comparison does, as in
// Kyverno ("1.10" > "1.9" as versions).
func compare(key, value any, holds func(int) bool) bool {
	if kf, ok := variables.ToFloat(key); ok {
		return compareNumber(kf, value, holds)
	}
	k, ok := key.(string)
	if !ok {
		return false
	}
	vs, vIsString := value.(string)
	vf, vIsNumber := variables.ToFloat(value)
	if kd, ok := duration(k); ok {
		switch {
		case vIsString:
			if vd, ok := duration(vs); ok {
				return holds(cmpFloat(float64(kd), float64(vd)))
			}
		case vIsNumber:
			if _, err := strconv.ParseFloat(k, 64); err != nil { // "90s" against seconds
				return holds(cmpFloat(kd.Seconds(), vf))
			}
		}
	}
	if kq, ok := quantity(k); ok {
		var vq resource.Quantity
		var isQ bool
		switch {
		case vIsString:
			vq, isQ = quantity(vs)
		case vIsNumber && !math.IsNaN(vf) && !math.IsInf(vf, 0):
			vq, isQ = *resource.NewMilliQuantity(int64(vf*1000), resource.DecimalSI), math.Abs(vf) < 9e15
		}
		if isQ && holds(kq.Cmp(vq)) {
			return true
		}
	}
	if vIsString {
		if c, err := variables.CompareVersions(k, vs); err == nil && strings.Count(k, ".") >= 1 && holds(c) {
			return true
		}
	}
	if kf, err := strconv.ParseFloat(strings.TrimSpace(k), 64); err == nil {
		return compareNumber(kf, value, holds)
	}
	return false
}

func compareNumber(kf float64, value any, holds func(int) bool) bool {
	if math.IsNaN(kf) {
		return false
	}
	if vf, ok := variables.ToFloat(value); ok {
		return !math.IsNaN(vf) && holds(cmpFloat(kf, vf))
	}
	vs, ok := value.(string)
	if !ok {
		return false
	}
	if vf, err := strconv.ParseFloat(strings.TrimSpace(vs), 64); err == nil {
		return !math.IsNaN(vf) && holds(cmpFloat(kf, vf))
	}
	if vd, ok := duration(vs); ok { // seconds against a duration
		return holds(cmpFloat(kf, vd.Seconds()))
	}
	if vq, ok := quantity(vs); ok {
		return holds(cmpFloat(kf, vq.AsApproximateFloat64()))
	}
	return false
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareDurations is the deprecated Duration* family: both sides must be
// durations, or numbers of seconds.
func compareDurations(key, value any, holds func(int) bool) bool {
	a, ok1 := asDuration(key)
	b, ok2 := asDuration(value)
	return ok1 && ok2 && holds(cmpFloat(a, b))
}

// asDuration reads a duration or a number of seconds, in seconds.
func asDuration(v any) (float64, bool) {
	if f, ok := variables.ToFloat(v); ok {
		return f, !math.IsNaN(f)
	}
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	if d, ok := duration(s); ok {
		return d.Seconds(), true
	}
	return 0, false
}

// KnownOperator reports whether name is a condition operator the engine
// evaluates (matched without regard to case, as Evaluate does).
func KnownOperator(name string) bool {
	_, ok := parseOperator(name)
	return ok
}

// Operators lists the operator names the engine evaluates, for messages.
func Operators() []string {
	out := make([]string, len(operatorNames))
	for i, o := range operatorNames {
		out[i] = o.name
	}
	return out
}
