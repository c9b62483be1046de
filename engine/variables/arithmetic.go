package variables

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	jpfunctions "github.com/jmespath-community/go-jmespath/pkg/functions"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Kyverno's arithmetic (add, subtract, multiply, divide, modulo, sum) works
// on three kinds of operand, told apart by how they are written:
//   - a number: a JSON number (`10` in backticks);
//   - a quantity: a string resource.ParseQuantity reads ('10Mi', '10', '30m':
//     "m" is milli, so minutes are not durations here, as Kyverno documents);
//   - a duration: any other string time.ParseDuration reads ('10h', '90s').
//
// add and subtract: number±number is a number; a quantity or a duration
// with a number reads the number as a quantity, or as seconds. multiply: a
// quantity or duration times a number keeps its kind. divide: by a number
// keeps the kind; a quantity by a quantity or a duration by a duration is a
// number. modulo: within one kind (numbers must be integers). Other
// combinations, and division by zero, are errors.

type kind int

const (
	kNumber kind = iota
	kQuantity
	kDuration
)

func (k kind) String() string {
	return [...]string{"number", "quantity", "duration"}[k]
}

type operand struct {
	kind     kind
	num      float64
	quantity resource.Quantity
	duration time.Duration
}

func parseOperand(v any) (operand, error) {
	if f, ok := ToFloat(v); ok {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return operand{}, fmt.Errorf("%v is not a finite number", v)
		}
		return operand{kind: kNumber, num: f}, nil
	}
	s, ok := v.(string)
	if !ok {
		return operand{}, fmt.Errorf("%s is not a number, quantity or duration", format(v))
	}
	if q, err := resource.ParseQuantity(s); err == nil {
		return operand{kind: kQuantity, quantity: q}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return operand{kind: kDuration, duration: d}, nil
	}
	return operand{}, fmt.Errorf("%q is not a number, quantity or duration", s)
}

type op int

const (
	opAdd op = iota
	opSubtract
	opMultiply
	opDivide
	opModulo
)

var opNames = [...]string{"add", "subtract", "multiply", "divide", "modulo"}

func arithmetic(o op) jpfunctions.JpFunction {
	return func(a []any) (any, error) {
		out, err := compute(o, a[0], a[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opNames[o], err)
		}
		return out, nil
	}
}

func compute(o op, x, y any) (any, error) {
	a, err := parseOperand(x)
	if err != nil {
		return nil, err
	}
	b, err := parseOperand(y)
	if err != nil {
		return nil, err
	}
	mismatch := fmt.Errorf("cannot %s a %s and a %s", opNames[o], a.kind, b.kind)
	switch o {
	case opAdd, opSubtract:
		sign := 1.0
		if o == opSubtract {
			sign = -1
		}
		switch {
		case a.kind == kNumber && b.kind == kNumber:
			return a.num + sign*b.num, nil
		case a.kind == kDuration || b.kind == kDuration:
			da, ok1 := asDuration(a)
			db, ok2 := asDuration(b)
			if !ok1 || !ok2 {
				return nil, mismatch
			}
			return (da + time.Duration(sign)*db).String(), nil
		default: // quantities, or a quantity and a number
			ra, rb := rat(a), rat(b)
			if sign < 0 {
				rb.Neg(rb)
			}
			return quantityString(ra.Add(ra, rb), formatOf(a, b))
		}
	case opMultiply:
		if b.kind != kNumber {
			a, b = b, a
		}
		if b.kind != kNumber {
			return nil, mismatch
		}
		switch a.kind {
		case kNumber:
			return a.num * b.num, nil
		case kQuantity:
			r := rat(a)
			return quantityString(r.Mul(r, rat(b)), a.quantity.Format)
		default:
			return scaleDuration(a.duration, b.num)
		}
	case opDivide:
		if isZero(b) {
			return nil, errors.New("division by zero")
		}
		switch {
		case a.kind == kNumber && b.kind == kNumber:
			return a.num / b.num, nil
		case a.kind == kQuantity && b.kind == kNumber:
			r := rat(a)
			return quantityString(r.Quo(r, rat(b)), a.quantity.Format)
		case a.kind == kQuantity && b.kind == kQuantity:
			r := rat(a)
			f, _ := r.Quo(r, rat(b)).Float64()
			return f, nil
		case a.kind == kDuration && b.kind == kNumber:
			return scaleDuration(a.duration, 1/b.num)
		case a.kind == kDuration && b.kind == kDuration:
			return float64(a.duration) / float64(b.duration), nil
		}
		return nil, mismatch
	case opModulo:
		if a.kind != b.kind {
			return nil, mismatch
		}
		if isZero(b) {
			return nil, errors.New("division by zero")
		}
		switch a.kind {
		case kNumber:
			if a.num != math.Trunc(a.num) || b.num != math.Trunc(b.num) || math.Abs(a.num) > 1<<62 || math.Abs(b.num) > 1<<62 {
				return nil, errors.New("numbers must be integers")
			}
			return float64(int64(a.num) % int64(b.num)), nil
		case kDuration:
			return (a.duration % b.duration).String(), nil
		default:
			ra, rb := rat(a), rat(b)
			q := new(big.Rat).Quo(ra, rb)
			whole := new(big.Int).Quo(q.Num(), q.Denom()) // truncated toward zero
			rem := ra.Sub(ra, rb.Mul(rb, new(big.Rat).SetInt(whole)))
			return quantityString(rem, a.quantity.Format)
		}
	}
	return nil, mismatch
}

// asDuration reads a duration, or a number as seconds.
func asDuration(o operand) (time.Duration, bool) {
	switch o.kind {
	case kDuration:
		return o.duration, true
	case kNumber:
		if math.Abs(o.num) > math.MaxInt64/float64(time.Second) {
			return 0, false
		}
		return time.Duration(o.num * float64(time.Second)), true
	}
	return 0, false
}

func scaleDuration(d time.Duration, f float64) (any, error) {
	r := float64(d) * f
	if math.IsNaN(r) || math.Abs(r) > math.MaxInt64 {
		return nil, errors.New("duration out of range")
	}
	return time.Duration(r).String(), nil
}

func isZero(o operand) bool {
	switch o.kind {
	case kNumber:
		return o.num == 0
	case kDuration:
		return o.duration == 0
	}
	return o.quantity.IsZero()
}

// rat reads a quantity or a number exactly.
func rat(o operand) *big.Rat {
	if o.kind == kNumber {
		r, ok := new(big.Rat).SetString(formatFloat(o.num))
		if !ok {
			r = new(big.Rat).SetFloat64(o.num)
		}
		return r
	}
	q := o.quantity.DeepCopy()
	d := q.AsDec()
	r := new(big.Rat).SetInt(d.UnscaledBig())
	scale := int64(d.Scale())
	if scale > 0 {
		r.Quo(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil)))
	} else if scale < 0 {
		r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil)))
	}
	return r
}

// formatOf picks the format of a quantity result: the first quantity's.
func formatOf(a, b operand) resource.Format {
	if a.kind == kQuantity {
		return a.quantity.Format
	}
	return b.quantity.Format
}

// quantityString writes an exact value as a canonical quantity of the given
// format, rounded to nano units.
func quantityString(r *big.Rat, f resource.Format) (any, error) {
	s := strings.TrimRight(strings.TrimRight(r.FloatString(9), "0"), ".")
	if s == "" || s == "-" {
		s = "0"
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return nil, fmt.Errorf("result %s is not a quantity: %w", s, err)
	}
	if f != "" {
		q = *resource.NewDecimalQuantity(*q.AsDec(), f) // the parsed text is cached: rebuild to render in f
	}
	return q.String(), nil
}

// jpSum adds the elements of an array: numbers, quantities or durations,
// all of one kind.
func jpSum(a []any) (any, error) {
	list, _ := a[0].([]any)
	if len(list) == 0 {
		return nil, errors.New("sum: at least one element is required")
	}
	first, err := parseOperand(list[0])
	if err != nil {
		return nil, fmt.Errorf("sum: %w", err)
	}
	acc := list[0]
	if len(list) == 1 && first.kind == kNumber {
		return first.num, nil
	}
	for _, v := range list[1:] {
		o, err := parseOperand(v)
		if err != nil {
			return nil, fmt.Errorf("sum: %w", err)
		}
		if o.kind != first.kind {
			return nil, fmt.Errorf("sum: cannot mix a %s and a %s", first.kind, o.kind)
		}
		if acc, err = compute(opAdd, acc, v); err != nil {
			return nil, fmt.Errorf("sum: %w", err)
		}
	}
	return acc, nil
}
