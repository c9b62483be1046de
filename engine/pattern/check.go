package pattern

import (
	"fmt"
	"slices"
	"strconv"
)

// Check reports the first construct of a pattern that can never be
// evaluated meaningfully, so that a policy using it can be rejected with a
// clear reason rather than failing every resource: a value outside the JSON
// data model, an empty list, or an existence anchor whose value is not a
// non-empty list. The error names the pattern path.
func Check(pattern any) error {
	return check(pattern, "/")
}

func check(p any, path string) error {
	switch t := p.(type) {
	case map[string]any:
		for _, k := range sortedKeys(t) {
			a, name := parseKey(k)
			if a == anchorExistence {
				if l, ok := t[k].([]any); !ok || len(l) == 0 {
					return fmt.Errorf("pattern %s%s: existence anchor %s needs a non-empty list", path, name, k)
				}
			}
			if err := check(t[k], path+name+"/"); err != nil {
				return err
			}
		}
	case []any:
		if len(t) == 0 {
			return fmt.Errorf("pattern %s: empty list", path)
		}
		for i, v := range t {
			if err := check(v, path+strconv.Itoa(i)+"/"); err != nil {
				return err
			}
		}
	case string, nil, bool:
		// Any string is a pattern value. An operator without operand
		// (">=") is accepted, as Kyverno accepts it, and matches nothing
		// but itself (see MatchValue): the rule fails on every resource
		// that has the field, as it does in Kyverno.
	default:
		if _, ok := toNumber(p); !ok {
			return fmt.Errorf("pattern %s: unsupported value of type %T", path, p)
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
