package conditions

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/engine/wildcard"
)

// setOp decides a set operator from how many keys were found.
type setOp func(found, keys int) bool

func anyIn(found, _ int) bool       { return found > 0 }
func allIn(found, keys int) bool    { return found == keys }
func anyNotIn(found, keys int) bool { return found < keys }
func allNotIn(found, _ int) bool    { return found == 0 }

// inSet evaluates a set operator. The keys are the key's elements (a scalar
// is a list of one); the value is a list, a JSON list in a string, or a
// string of comma-separated entries (one entry without commas). Null and
// other scalars are not sets: every set operator is then false.
func inSet(key, value any, decide setOp) bool {
	keys, ok := setKeys(key)
	if !ok {
		return false
	}
	switch v := value.(type) {
	case []any:
		return decide(countFound(keys, v), len(keys))
	case string:
		if list, ok := jsonList(v); ok {
			return decide(countFound(keys, list), len(keys))
		}
		return decide(countFound(keys, splitEntries(v)), len(keys))
	}
	return false
}

// splitEntries reads "a, b,c" as three entries.
func splitEntries(s string) []any {
	if !strings.Contains(s, ",") {
		return []any{s}
	}
	parts := strings.Split(s, ",")
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = strings.TrimSpace(p)
	}
	return out
}

// setKeys lists the elements of a key; null and objects are not keys.
func setKeys(key any) ([]any, bool) {
	switch k := key.(type) {
	case []any:
		return k, true
	case nil, map[string]any:
		return nil, false
	}
	return []any{key}, true
}

// jsonList reads a JSON list held in a string, as ConfigMap data often is.
func jsonList(s string) ([]any, bool) {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "[") {
		return nil, false
	}
	var list []any
	if json.Unmarshal([]byte(t), &list) != nil {
		return nil, false
	}
	return list, true
}

func countFound(keys, values []any) int {
	found := 0
	for _, k := range keys {
		if contained(k, values) {
			found++
		}
	}
	return found
}

// contained reports whether a key element matches an entry: as strings with
// wildcards on either side, as equal numbers, or within a range entry.
func contained(k any, values []any) bool {
	ks := render(k)
	for _, v := range values {
		vs := render(v)
		if ks == vs || wildcard.Match(vs, ks) || wildcard.Match(ks, vs) {
			return true
		}
		if kf, ok := number(k); ok {
			if vf, ok := number(v); ok && kf == vf {
				return true
			}
			if lo, hi, inside, ok := parseRange(vs); ok && (kf >= lo && kf <= hi) == inside {
				return true
			}
		}
	}
	return false
}

// render writes a set element as a string: numbers without a trailing .0,
// objects and lists as JSON.
func render(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case bool:
		return strconv.FormatBool(t)
	case nil:
		return "null"
	}
	if f, ok := variables.ToFloat(v); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

// number reads a number or a numeric string.
func number(v any) (float64, bool) {
	if f, ok := variables.ToFloat(v); ok {
		return f, !math.IsNaN(f)
	}
	s, ok := v.(string)
	if !ok || s == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && !math.IsNaN(f)
}

// parseRange reads "lo-hi" (inside: true) or "lo!-hi" (inside: false);
// the bounds are numbers and may be negative ("-10-10").
func parseRange(s string) (lo, hi float64, inside, ok bool) {
	for i := 1; i < len(s); i++ {
		if s[i] != '-' {
			continue
		}
		left, right, in := s[:i], s[i+1:], true
		if strings.HasSuffix(left, "!") {
			left, in = left[:len(left)-1], false
		}
		a, err1 := strconv.ParseFloat(strings.TrimSpace(left), 64)
		b, err2 := strconv.ParseFloat(strings.TrimSpace(right), 64)
		if err1 == nil && err2 == nil && !math.IsNaN(a) && !math.IsNaN(b) {
			return a, b, in, true
		}
	}
	return 0, 0, false, false
}
