// Package conditions evaluates Kyverno conditions (preconditions, deny
// conditions, exception conditions): {key, operator, value} triples grouped
// as {any: [...], all: [...]} or as a plain list that must all hold.
package conditions

import (
	"encoding/json"
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

// Mode says what the conditions are for.
type Mode int

const (
	// Preconditions: conditions that must hold for a rule to apply.
	Preconditions Mode = iota
	// Deny: conditions under which a request is denied.
	Deny
)

// AnyAll evaluates conditions given as {any, all} or as a list (all must
// hold), after substituting their variables from data. Variables that
// resolve to nothing compare as null. It returns whether the conditions hold
// and, when they do not, the message of the first condition that failed.
func AnyAll(conds any, data map[string]any, _ Mode) (bool, string, error) {
	switch c := conds.(type) {
	case nil:
		return true, "", nil
	case []any:
		return all(c, data)
	case map[string]any:
		anyList, _ := c["any"].([]any)
		allList, _ := c["all"].([]any)
		if len(anyList) > 0 {
			ok, msg, err := anyOf(anyList, data)
			if err != nil || !ok {
				return ok, msg, err
			}
		}
		if len(allList) > 0 {
			return all(allList, data)
		}
		return true, "", nil
	}
	return false, "", fmt.Errorf("conditions must be {any, all} or a list, not %T", conds)
}

func anyOf(list []any, data map[string]any) (bool, string, error) {
	msg := ""
	for _, c := range list {
		ok, m, err := one(c, data)
		if err != nil {
			return false, "", err
		}
		if ok {
			return true, "", nil
		}
		if msg == "" {
			msg = m
		}
	}
	return false, msg, nil
}

func all(list []any, data map[string]any) (bool, string, error) {
	for _, c := range list {
		ok, m, err := one(c, data)
		if err != nil || !ok {
			return false, m, err
		}
	}
	return true, "", nil
}

func one(c any, data map[string]any) (bool, string, error) {
	m, ok := c.(map[string]any)
	if !ok {
		return false, "", fmt.Errorf("a condition must be an object, not %T", c)
	}
	op, _ := m["operator"].(string)
	key, err := variables.SubstituteMode(m["key"], data, variables.Lenient)
	if err != nil {
		return false, "", fmt.Errorf("condition key: %w", err)
	}
	value, err := variables.SubstituteMode(m["value"], data, variables.Lenient)
	if err != nil {
		return false, "", fmt.Errorf("condition value: %w", err)
	}
	holds, err := Evaluate(key, op, value)
	if err != nil {
		return false, "", err
	}
	msg, _ := m["message"].(string)
	if msg != "" {
		if s, err := variables.SubstituteString(msg, data); err == nil {
			msg = s
		}
	}
	return holds, msg, nil
}

// Evaluate applies one operator to an already substituted key and value.
// Operator names are matched without regard to case.
func Evaluate(key any, operator string, value any) (bool, error) {
	switch strings.ToLower(operator) {
	case "equal", "equals":
		return equals(key, value), nil
	case "notequal", "notequals":
		return !equals(key, value), nil
	}
	if isSetOperator(operator) && (key == nil || value == nil) {
		return false, nil // a null operand is neither in nor out of a set, as in Kyverno
	}
	switch strings.ToLower(operator) {
	case "in":
		return allIn(key, value), nil
	case "notin":
		return !allIn(key, value), nil
	case "anyin":
		return anyIn(key, value), nil
	case "allin":
		return allIn(key, value), nil
	case "anynotin":
		return anyNotIn(key, value), nil
	case "allnotin":
		return !anyIn(key, value), nil
	case "greaterthan", "durationgreaterthan":
		return compare(key, value, func(c int) bool { return c > 0 })
	case "greaterthanorequals", "durationgreaterthanorequals":
		return compare(key, value, func(c int) bool { return c >= 0 })
	case "lessthan", "durationlessthan":
		return compare(key, value, func(c int) bool { return c < 0 })
	case "lessthanorequals", "durationlessthanorequals":
		return compare(key, value, func(c int) bool { return c <= 0 })
	}
	return false, fmt.Errorf("unknown condition operator %q", operator)
}

func isSetOperator(op string) bool {
	switch strings.ToLower(op) {
	case "in", "notin", "anyin", "allin", "anynotin", "allnotin":
		return true
	}
	return false
}

// equals compares numbers by value, quantities and durations as such, strings
// with the value's wildcards, and objects and lists deeply.
func equals(key, value any) bool {
	if kf, ok := number(key); ok {
		if vf, ok := number(value); ok {
			return kf == vf
		}
	}
	ks, kIsStr := key.(string)
	vs, vIsStr := value.(string)
	if kIsStr && vIsStr {
		if ks == vs {
			return true
		}
		if a, b, ok := measure(ks, vs); ok {
			return a == b
		}
		return wildcard.Has(vs) && wildcard.Match(vs, ks)
	}
	if kIsStr != vIsStr {
		// "true" vs true, "3" vs 3: Kyverno compares the string forms.
		if kIsStr {
			return ks == render(value)
		}
		return vs == render(key) || (wildcard.Has(vs) && wildcard.Match(vs, render(key)))
	}
	return reflect.DeepEqual(normalize(key), normalize(value))
}

func render(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case bool:
		return strconv.FormatBool(t)
	}
	if f, ok := number(v); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// normalize makes numbers comparable across int and float types.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			out[k] = normalize(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = normalize(val)
		}
		return out
	}
	if f, ok := number(v); ok {
		return f
	}
	return v
}

func number(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case int:
		return float64(t), true
	case int64:
		return float64(t), true
	case json.Number:
		f, err := t.Float64()
		return f, err == nil
	}
	return 0, false
}

// startsNumeric is a cheap pre-check before parsing a number, quantity or
// duration: each of them starts with a digit, a sign or a dot.
func startsNumeric(s string) bool {
	if s == "" {
		return false
	}
	c := s[0]
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.'
}

// measure reads two strings as numbers, quantities or durations of one kind.
func measure(a, b string) (float64, float64, bool) {
	if !startsNumeric(a) || !startsNumeric(b) {
		return 0, 0, false
	}
	if x, err1 := strconv.ParseFloat(a, 64); err1 == nil {
		if y, err2 := strconv.ParseFloat(b, 64); err2 == nil {
			return x, y, true
		}
	}
	onlyDuration := func(s string) bool {
		_, errD := time.ParseDuration(s)
		_, errQ := resource.ParseQuantity(s)
		return errD == nil && errQ != nil
	}
	if onlyDuration(a) || onlyDuration(b) {
		x, err1 := time.ParseDuration(a)
		y, err2 := time.ParseDuration(b)
		return x.Seconds(), y.Seconds(), err1 == nil && err2 == nil
	}
	x, err1 := resource.ParseQuantity(a)
	y, err2 := resource.ParseQuantity(b)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return x.AsApproximateFloat64(), y.AsApproximateFloat64(), true
}

// compare orders key and value as numbers, quantities or durations (and
// semantic versions when both read as such).
func compare(key, value any, ok func(int) bool) (bool, error) {
	kf, kNum := number(key)
	vf, vNum := number(value)
	ks, kStr := key.(string)
	vs, vStr := value.(string)
	switch {
	case kNum && vNum:
	case kNum && vStr:
		f, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			if _, y, m := measure(strconv.FormatFloat(kf, 'f', -1, 64), vs); m {
				vf = y
				break
			}
			return false, nil
		}
		vf = f
	case kStr && vNum:
		f, err := strconv.ParseFloat(ks, 64)
		if err != nil {
			if x, _, m := measure(ks, strconv.FormatFloat(vf, 'f', -1, 64)); m {
				kf = x
				break
			}
			return false, nil
		}
		kf = f
	case kStr && vStr:
		if x, y, m := measure(ks, vs); m {
			kf, vf = x, y
			break
		}
		if strings.Count(ks, ".") == 2 && strings.Count(vs, ".") == 2 {
			if c, err := variables.CompareSemver(ks, vs); err == nil {
				return ok(c), nil
			}
		}
		return false, nil
	default:
		return false, nil
	}
	c := 0
	switch {
	case kf < vf:
		c = -1
	case kf > vf:
		c = 1
	}
	if math.IsNaN(kf) || math.IsNaN(vf) {
		return false, nil
	}
	return ok(c), nil
}

// values turns a condition value into the list of entries to look in: a list
// as it is, a string with commas as its parts (Kyverno accepts "a,b"), any
// other value as a list of one.
func values(v any) []any {
	switch t := v.(type) {
	case []any:
		return t
	case string:
		if trimmed := strings.TrimSpace(t); strings.HasPrefix(trimmed, "[") {
			var list []any
			if json.Unmarshal([]byte(trimmed), &list) == nil {
				return list // a JSON list held in a string, as ConfigMap data often is
			}
		}
		if strings.Contains(t, ",") && !strings.ContainsAny(t, "[{") {
			parts := strings.Split(t, ",")
			out := make([]any, len(parts))
			for i, p := range parts {
				out[i] = strings.TrimSpace(p)
			}
			return out
		}
		return []any{t}
	case nil:
		return nil
	}
	return []any{v}
}

func keys(k any) []any {
	if l, ok := k.([]any); ok {
		return l
	}
	if k == nil {
		return nil
	}
	return []any{k}
}

// contained reports whether one key element is among the values: equal
// (wildcards on either side), or within a numeric range "lo-hi".
func contained(k any, vals []any) bool {
	ks, kIsStr := k.(string)
	for _, v := range vals {
		if equals(k, v) {
			return true
		}
		// Wildcards work both ways in set operators: a key of "*" is in any set.
		if vs, ok := v.(string); ok && kIsStr && wildcard.Has(ks) && wildcard.Match(ks, vs) {
			return true
		}
		if s, ok := v.(string); ok && inRange(k, s) {
			return true
		}
	}
	return false
}

func inRange(k any, r string) bool {
	i := strings.Index(r[min(1, len(r)):], "-")
	if i < 0 {
		return false
	}
	i++
	lo, err1 := strconv.ParseFloat(strings.TrimSpace(r[:i]), 64)
	hi, err2 := strconv.ParseFloat(strings.TrimSpace(r[i+1:]), 64)
	if err1 != nil || err2 != nil {
		return false
	}
	f, ok := number(k)
	if !ok {
		s, isStr := k.(string)
		if !isStr {
			return false
		}
		var err error
		if f, err = strconv.ParseFloat(s, 64); err != nil {
			return false
		}
	}
	return f >= lo && f <= hi
}

func anyIn(key, value any) bool {
	vals := values(value)
	for _, k := range keys(key) {
		if contained(k, vals) {
			return true
		}
	}
	return false
}

func allIn(key, value any) bool {
	vals := values(value)
	ks := keys(key)
	if len(ks) == 0 {
		return false
	}
	for _, k := range ks {
		if !contained(k, vals) {
			return false
		}
	}
	return true
}

func anyNotIn(key, value any) bool {
	vals := values(value)
	for _, k := range keys(key) {
		if !contained(k, vals) {
			return true
		}
	}
	return false
}
