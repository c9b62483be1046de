package cel

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// Normalize returns a JSON-shaped value as the API server hands it to CEL:
// whole numbers are int64 (encoding/json decodes every number as float64,
// and CEL tells int from double: object.spec.replicas + 1 must be an int).
// Maps and slices that hold no such number are returned as they are, never
// copied; the input is never modified.
func Normalize(v any) any {
	out, _ := normalize(v)
	return out
}

// normalize reports whether it built a new value.
func normalize(v any) (any, bool) {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && x >= math.MinInt64 && x < math.MaxInt64 {
			return int64(x), true
		}
	case float32:
		return normalize(float64(x))
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, true
		}
		if f, err := x.Float64(); err == nil {
			return f, true
		}
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			n, changed := normalize(e)
			if !changed {
				continue
			}
			if out == nil {
				out = make(map[string]any, len(x))
				for k2, e2 := range x {
					out[k2] = e2
				}
			}
			out[k] = n
		}
		if out != nil {
			return out, true
		}
	case []any:
		var out []any
		for i, e := range x {
			n, changed := normalize(e)
			if !changed {
				continue
			}
			if out == nil {
				out = append([]any(nil), x...)
			}
			out[i] = n
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}

// Native turns a CEL value into a JSON-shaped Go value.
func Native(v ref.Val) (any, error) {
	switch v.Type() {
	case types.NullType:
		return nil, nil
	case types.MapType:
		m, ok := v.(traits.Mapper)
		if !ok {
			break
		}
		out := map[string]any{}
		for it := m.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.Value().(string)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k)
			}
			e, err := Native(m.Get(k))
			if err != nil {
				return nil, err
			}
			out[ks] = e
		}
		return out, nil
	case types.ListType:
		l, ok := v.(traits.Lister)
		if !ok {
			break
		}
		out := []any{}
		for it := l.Iterator(); it.HasNext() == types.True; {
			e, err := Native(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	switch x := v.Value().(type) {
	case []byte, string, bool, int64, uint64, float64:
		return x, nil
	}
	if types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	return fmt.Sprint(v.Value()), nil
}
