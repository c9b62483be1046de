package variables

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	jpfunctions "github.com/jmespath-community/go-jmespath/pkg/functions"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/engine/wildcard"
)

var (
	functionsOnce sync.Once
	functionList  []jpfunctions.FunctionEntry
)

// functions are Kyverno's custom JMESPath functions. Where a name exists in
// the standard library too (items, sum), Kyverno's meaning wins.
func functions() []jpfunctions.FunctionEntry {
	functionsOnce.Do(func() {
		s, n, a, o, any_ := jpfunctions.JpString, jpfunctions.JpNumber, jpfunctions.JpArray, jpfunctions.JpObject, jpfunctions.JpAny
		arg := func(t ...jpfunctions.JpType) jpfunctions.ArgSpec { return jpfunctions.ArgSpec{Types: t} }
		opt := func(t ...jpfunctions.JpType) jpfunctions.ArgSpec {
			return jpfunctions.ArgSpec{Types: t, Optional: true}
		}
		fn := func(name string, h jpfunctions.JpFunction, args ...jpfunctions.ArgSpec) jpfunctions.FunctionEntry {
			return jpfunctions.FunctionEntry{Name: name, Arguments: args, Handler: h}
		}
		functionList = []jpfunctions.FunctionEntry{
			fn("compare", strings2(func(a, b string) any { return float64(strings.Compare(a, b)) }), arg(s), arg(s)),
			fn("equal_fold", strings2(func(a, b string) any { return strings.EqualFold(a, b) }), arg(s), arg(s)),
			fn("replace", jpReplace, arg(s), arg(s), arg(s), opt(n)),
			fn("replace_all", func(args []any) (any, error) {
				return strings.ReplaceAll(str(args[0]), str(args[1]), str(args[2])), nil
			}, arg(s), arg(s), arg(s)),
			fn("to_upper", strings1(strings.ToUpper), arg(s)),
			fn("to_lower", strings1(strings.ToLower), arg(s)),
			fn("trim", func(args []any) (any, error) {
				if len(args) > 1 {
					return strings.Trim(str(args[0]), str(args[1])), nil
				}
				return strings.TrimSpace(str(args[0])), nil
			}, arg(s), opt(s)),
			fn("trim_prefix", strings2(func(a, b string) any { return strings.TrimPrefix(a, b) }), arg(s), arg(s)),
			fn("split", func(args []any) (any, error) {
				parts := strings.Split(str(args[0]), str(args[1]))
				out := make([]any, len(parts))
				for i, p := range parts {
					out[i] = p
				}
				return out, nil
			}, arg(s), arg(s)),
			fn("regex_replace_all", jpRegexReplace(false), arg(s), arg(s, n), arg(s, n)),
			fn("regex_replace_all_literal", jpRegexReplace(true), arg(s), arg(s, n), arg(s, n)),
			fn("regex_match", func(args []any) (any, error) {
				re, err := regex(str(args[0]))
				if err != nil {
					return nil, err
				}
				return re.MatchString(scalarString(args[1])), nil
			}, arg(s), arg(s, n)),
			fn("pattern_match", func(args []any) (any, error) {
				return wildcard.Match(str(args[0]), scalarString(args[1])), nil
			}, arg(s), arg(s, n)),
			fn("label_match", jpLabelMatch, arg(o), arg(o)),
			fn("add", arith("add"), arg(any_), arg(any_)),
			fn("subtract", arith("subtract"), arg(any_), arg(any_)),
			fn("multiply", arith("multiply"), arg(any_), arg(any_)),
			fn("divide", arith("divide"), arg(any_), arg(any_)),
			fn("modulo", arith("modulo"), arg(any_), arg(any_)),
			fn("sum", jpSum, arg(a)),
			fn("round", func(args []any) (any, error) {
				f, _ := toFloat(args[0])
				d, _ := toFloat(args[1])
				p := math.Pow(10, d)
				return math.Round(f*p) / p, nil
			}, arg(n), arg(n)),
			fn("base64_decode", func(args []any) (any, error) {
				b, err := base64.StdEncoding.DecodeString(str(args[0]))
				return string(b), err
			}, arg(s)),
			fn("base64_encode", strings1(func(v string) string { return base64.StdEncoding.EncodeToString([]byte(v)) }), arg(s)),
			fn("sha256", strings1(func(v string) string { h := sha256.Sum256([]byte(v)); return hex.EncodeToString(h[:]) }), arg(s)),
			fn("time_since", jpTimeSince, arg(s), arg(s), arg(s)),
			fn("time_now", func([]any) (any, error) { return time.Now().Format(time.RFC3339), nil }),
			fn("time_now_utc", func([]any) (any, error) { return time.Now().UTC().Format(time.RFC3339), nil }),
			fn("time_add", func(args []any) (any, error) {
				t, err := time.Parse(time.RFC3339, str(args[0]))
				if err != nil {
					return nil, err
				}
				d, err := time.ParseDuration(str(args[1]))
				if err != nil {
					return nil, err
				}
				return t.Add(d).Format(time.RFC3339), nil
			}, arg(s), arg(s)),
			fn("time_parse", func(args []any) (any, error) {
				t, err := time.Parse(str(args[0]), str(args[1]))
				if err != nil {
					return nil, err
				}
				return t.Format(time.RFC3339), nil
			}, arg(s), arg(s)),
			fn("time_utc", timeFn1(func(t time.Time) any { return t.UTC().Format(time.RFC3339) }), arg(s)),
			fn("time_diff", timeFn2(func(a, b time.Time) any { return b.Sub(a).String() }), arg(s), arg(s)),
			fn("time_before", timeFn2(func(a, b time.Time) any { return a.Before(b) }), arg(s), arg(s)),
			fn("time_after", timeFn2(func(a, b time.Time) any { return a.After(b) }), arg(s), arg(s)),
			fn("time_between", func(args []any) (any, error) {
				ts, err := parseTimes(args...)
				if err != nil {
					return nil, err
				}
				return ts[0].After(ts[1]) && ts[0].Before(ts[2]), nil
			}, arg(s), arg(s), arg(s)),
			fn("time_truncate", func(args []any) (any, error) {
				t, err := time.Parse(time.RFC3339, str(args[0]))
				if err != nil {
					return nil, err
				}
				d, err := time.ParseDuration(str(args[1]))
				if err != nil {
					return nil, err
				}
				return t.Truncate(d).Format(time.RFC3339), nil
			}, arg(s), arg(s)),
			fn("path_canonicalize", strings1(path.Clean), arg(s)),
			fn("truncate", func(args []any) (any, error) {
				s := str(args[0])
				l, _ := toFloat(args[1])
				if int(l) < len(s) && l >= 0 {
					return s[:int(l)], nil
				}
				return s, nil
			}, arg(s), arg(n)),
			fn("semver_compare", jpSemverCompare, arg(s), arg(s)),
			fn("parse_json", func(args []any) (any, error) {
				var v any
				err := json.Unmarshal([]byte(str(args[0])), &v)
				return v, err
			}, arg(s)),
			fn("parse_yaml", func(args []any) (any, error) {
				var v any
				err := yaml.Unmarshal([]byte(str(args[0])), &v)
				return v, err
			}, arg(s)),
			fn("lookup", func(args []any) (any, error) {
				switch c := args[0].(type) {
				case map[string]any:
					return c[scalarString(args[1])], nil
				case []any:
					i, ok := toFloat(args[1])
					if !ok || i < 0 || int(i) >= len(c) || i != math.Trunc(i) {
						return nil, nil
					}
					return c[int(i)], nil
				}
				return nil, fmt.Errorf("lookup: first argument must be an object or an array")
			}, arg(o, a), arg(s, n)),
			fn("items", jpItems, arg(o, a), opt(s), opt(s)),
			fn("object_from_lists", func(args []any) (any, error) {
				keys, _ := args[0].([]any)
				vals, _ := args[1].([]any)
				out := make(map[string]any, len(keys))
				for i, k := range keys {
					var v any
					if i < len(vals) {
						v = vals[i]
					}
					out[scalarString(k)] = v
				}
				return out, nil
			}, arg(a), arg(a)),
			fn("is_external_url", func(args []any) (any, error) {
				u, err := url.Parse(str(args[0]))
				if err != nil || u.Host == "" {
					return false, nil
				}
				ip := net.ParseIP(u.Hostname())
				if ip == nil {
					return u.Hostname() != "localhost", nil
				}
				return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast()), nil
			}, arg(s)),
			fn("to_boolean", func(args []any) (any, error) {
				b, err := strconv.ParseBool(strings.ToLower(str(args[0])))
				if err != nil {
					return nil, fmt.Errorf("to_boolean: %q is not a boolean", str(args[0]))
				}
				return b, nil
			}, arg(s)),
		}
	})
	return functionList
}

func str(v any) string { s, _ := v.(string); return s }

// scalarString renders a string or a number argument.
func scalarString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return format(v)
}

func toFloat(v any) (float64, bool) {
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

func strings1(f func(string) string) jpfunctions.JpFunction {
	return func(args []any) (any, error) { return f(str(args[0])), nil }
}

func strings2(f func(a, b string) any) jpfunctions.JpFunction {
	return func(args []any) (any, error) { return f(str(args[0]), str(args[1])), nil }
}

func jpReplace(args []any) (any, error) {
	n := -1
	if len(args) > 3 {
		f, _ := toFloat(args[3])
		n = int(f)
	}
	return strings.Replace(str(args[0]), str(args[1]), str(args[2]), n), nil
}

var regexCache sync.Map

func regex(expr string) (*regexp.Regexp, error) {
	if r, ok := regexCache.Load(expr); ok {
		return r.(*regexp.Regexp), nil
	}
	r, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression %q: %w", expr, err)
	}
	regexCache.Store(expr, r)
	return r, nil
}

func jpRegexReplace(literal bool) jpfunctions.JpFunction {
	return func(args []any) (any, error) {
		re, err := regex(str(args[0]))
		if err != nil {
			return nil, err
		}
		src, repl := scalarString(args[1]), scalarString(args[2])
		if literal {
			return re.ReplaceAllLiteralString(src, repl), nil
		}
		return re.ReplaceAllString(src, repl), nil
	}
}

func jpLabelMatch(args []any) (any, error) {
	sel, _ := args[0].(map[string]any)
	lbls, _ := args[1].(map[string]any)
	set := labels.Set{}
	for k, v := range lbls {
		set[k] = scalarString(v)
	}
	for k, v := range sel {
		if set[k] != scalarString(v) {
			return false, nil
		}
	}
	return true, nil
}

// operand is a number, a quantity or a duration.
type operand struct {
	kind     byte // 'n', 'q', 'd'
	num      float64
	quantity resource.Quantity
	duration time.Duration
}

// parseOperands reads two operands. Numbers stay numbers; strings such as
// "30m" read both as a quantity and as a duration, so the pair decides: a
// duration if either side is only a duration, else a quantity.
func parseOperands(x, y any) (operand, operand, error) {
	a, aq, ad, err := parseOperand(x)
	if err != nil {
		return a, a, err
	}
	b, bq, bd, err := parseOperand(y)
	if err != nil {
		return a, b, err
	}
	onlyDuration := func(o operand, q, d bool) bool { return o.kind != 'n' && d && !q }
	useDuration := onlyDuration(a, aq, ad) || onlyDuration(b, bq, bd)
	for _, o := range []*operand{&a, &b} {
		if o.kind == 'n' {
			continue
		}
		if useDuration {
			o.kind = 'd'
		} else if o.kind = 'q'; o.quantity.Format == "" {
			return a, b, fmt.Errorf("cannot combine %v and %v", x, y)
		}
	}
	if (a.kind == 'd' && b.kind == 'd') && (a.duration == 0 && !ad || b.duration == 0 && !bd) {
		return a, b, fmt.Errorf("cannot combine %v and %v", x, y)
	}
	return a, b, nil
}

// parseOperand reads a number, or a string as a quantity and/or a duration.
func parseOperand(v any) (o operand, isQuantity, isDuration bool, err error) {
	if f, ok := toFloat(v); ok {
		return operand{kind: 'n', num: f}, false, false, nil
	}
	s, ok := v.(string)
	if !ok {
		return o, false, false, fmt.Errorf("%v is not a number, quantity or duration", v)
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return operand{kind: 'n', num: f}, false, false, nil
	}
	o.kind = 's'
	if d, err := time.ParseDuration(s); err == nil {
		o.duration, isDuration = d, true
	}
	if q, err := resource.ParseQuantity(s); err == nil {
		o.quantity, isQuantity = q, true
	}
	if !isQuantity && !isDuration {
		return o, false, false, fmt.Errorf("%q is not a number, quantity or duration", s)
	}
	return o, isQuantity, isDuration, nil
}

// arith implements Kyverno's arithmetic on numbers, quantities and durations.
func arith(op string) jpfunctions.JpFunction {
	return func(args []any) (any, error) {
		a, b, err := parseOperands(args[0], args[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		switch op {
		case "add", "subtract":
			sign := 1.0
			if op == "subtract" {
				sign = -1
			}
			switch {
			case a.kind == 'n' && b.kind == 'n':
				return a.num + sign*b.num, nil
			case a.kind == 'q' && b.kind == 'q':
				q := a.quantity.DeepCopy()
				if sign > 0 {
					q.Add(b.quantity)
				} else {
					q.Sub(b.quantity)
				}
				return q.String(), nil
			case a.kind == 'd' && b.kind == 'd':
				return (a.duration + time.Duration(sign)*b.duration).String(), nil
			}
		case "multiply":
			switch {
			case a.kind == 'n' && b.kind == 'n':
				return a.num * b.num, nil
			case a.kind == 'q' && b.kind == 'n':
				return scaleQuantity(a.quantity, b.num), nil
			case a.kind == 'n' && b.kind == 'q':
				return scaleQuantity(b.quantity, a.num), nil
			case a.kind == 'd' && b.kind == 'n':
				return time.Duration(float64(a.duration) * b.num).String(), nil
			case a.kind == 'n' && b.kind == 'd':
				return time.Duration(float64(b.duration) * a.num).String(), nil
			}
		case "divide":
			if isZeroOperand(b) {
				return nil, errors.New("divide: division by zero")
			}
			switch {
			case a.kind == 'n' && b.kind == 'n':
				return a.num / b.num, nil
			case a.kind == 'q' && b.kind == 'q':
				return a.quantity.AsApproximateFloat64() / b.quantity.AsApproximateFloat64(), nil
			case a.kind == 'q' && b.kind == 'n':
				return scaleQuantity(a.quantity, 1/b.num), nil
			case a.kind == 'd' && b.kind == 'd':
				return float64(a.duration) / float64(b.duration), nil
			case a.kind == 'd' && b.kind == 'n':
				return time.Duration(float64(a.duration) / b.num).String(), nil
			}
		case "modulo":
			if isZeroOperand(b) {
				return nil, errors.New("modulo: division by zero")
			}
			switch {
			case a.kind == 'n' && b.kind == 'n':
				if a.num != math.Trunc(a.num) || b.num != math.Trunc(b.num) {
					return nil, errors.New("modulo: operands must be integers")
				}
				return float64(int64(a.num) % int64(b.num)), nil
			case a.kind == 'd' && b.kind == 'd':
				return (a.duration % b.duration).String(), nil
			case a.kind == 'q' && b.kind == 'q':
				av, bv := a.quantity.MilliValue(), b.quantity.MilliValue()
				return resource.NewMilliQuantity(av%bv, a.quantity.Format).String(), nil
			}
		}
		return nil, fmt.Errorf("%s: cannot combine %v and %v", op, args[0], args[1])
	}
}

func isZeroOperand(o operand) bool {
	switch o.kind {
	case 'n':
		return o.num == 0
	case 'd':
		return o.duration == 0
	}
	return o.quantity.IsZero()
}

func scaleQuantity(q resource.Quantity, f float64) string {
	return resource.NewMilliQuantity(int64(math.Round(float64(q.MilliValue())*f)), q.Format).String()
}

func jpSum(args []any) (any, error) {
	list, _ := args[0].([]any)
	if len(list) == 0 {
		return nil, errors.New("sum: empty array")
	}
	acc := list[0]
	var err error
	for _, v := range list[1:] {
		if acc, err = arith("add")([]any{acc, v}); err != nil {
			return nil, fmt.Errorf("sum: %w", err)
		}
	}
	return acc, nil
}

func timeFn1(f func(time.Time) any) jpfunctions.JpFunction {
	return func(args []any) (any, error) {
		ts, err := parseTimes(args...)
		if err != nil {
			return nil, err
		}
		return f(ts[0]), nil
	}
}

func timeFn2(f func(a, b time.Time) any) jpfunctions.JpFunction {
	return func(args []any) (any, error) {
		ts, err := parseTimes(args...)
		if err != nil {
			return nil, err
		}
		return f(ts[0], ts[1]), nil
	}
}

func parseTimes(args ...any) ([]time.Time, error) {
	out := make([]time.Time, len(args))
	for i, a := range args {
		t, err := time.Parse(time.RFC3339, str(a))
		if err != nil {
			return nil, fmt.Errorf("%q is not an RFC 3339 time", str(a))
		}
		out[i] = t
	}
	return out, nil
}

// jpTimeSince returns the time from start (layout, "" for RFC 3339) to end ("" for now).
func jpTimeSince(args []any) (any, error) {
	layout := str(args[0])
	if layout == "" {
		layout = time.RFC3339
	}
	start, err := time.Parse(layout, str(args[1]))
	if err != nil {
		return nil, fmt.Errorf("time_since: %w", err)
	}
	end := time.Now()
	if e := str(args[2]); e != "" {
		if end, err = time.Parse(layout, e); err != nil {
			return nil, fmt.Errorf("time_since: %w", err)
		}
	}
	return end.Sub(start).String(), nil
}

func jpSemverCompare(args []any) (any, error) {
	v, err := parseSemver(str(args[0]))
	if err != nil {
		return nil, err
	}
	// A constraint is "op version" ("1.2.3", ">=1.2.0", "!1.0.0"); several
	// joined by spaces must all hold, alternatives are separated by "||".
	for _, alt := range strings.Split(str(args[1]), "||") {
		ok := true
		for _, c := range strings.Fields(alt) {
			op, rest := splitOp(c)
			w, err := parseSemver(rest)
			if err != nil {
				return nil, err
			}
			cmp := compareSemver(v, w)
			switch op {
			case ">":
				ok = ok && cmp > 0
			case ">=":
				ok = ok && cmp >= 0
			case "<":
				ok = ok && cmp < 0
			case "<=":
				ok = ok && cmp <= 0
			case "!", "!=":
				ok = ok && cmp != 0
			default:
				ok = ok && cmp == 0
			}
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

func splitOp(c string) (string, string) {
	for _, op := range []string{">=", "<=", "!=", ">", "<", "!", "="} {
		if strings.HasPrefix(c, op) {
			return op, strings.TrimSpace(c[len(op):])
		}
	}
	return "", c
}

func parseSemver(s string) ([3]int, error) {
	var out [3]int
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) == 0 || len(parts) > 3 {
		return out, fmt.Errorf("%q is not a semantic version", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return out, fmt.Errorf("%q is not a semantic version", s)
		}
		out[i] = n
	}
	return out, nil
}

// CompareSemver orders two semantic versions ("v1.2.3", "1.2"): -1, 0 or 1.
func CompareSemver(a, b string) (int, error) {
	x, err := parseSemver(a)
	if err != nil {
		return 0, err
	}
	y, err := parseSemver(b)
	if err != nil {
		return 0, err
	}
	return compareSemver(x, y), nil
}

func compareSemver(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// jpItems: items(object, keyName, valueName) gives [{keyName: k, valueName: v}],
// items(array, keyName, valueName) [{keyName: index, valueName: v}]; with one
// argument, the standard [[k, v]] pairs.
func jpItems(args []any) (any, error) {
	if len(args) == 1 {
		m, ok := args[0].(map[string]any)
		if !ok {
			return nil, errors.New("items: expected an object")
		}
		out := make([]any, 0, len(m))
		for _, k := range sortedKeys(m) {
			out = append(out, []any{k, m[k]})
		}
		return out, nil
	}
	kn, vn := "key", "value"
	if len(args) > 1 {
		kn = str(args[1])
	}
	if len(args) > 2 {
		vn = str(args[2])
	}
	switch c := args[0].(type) {
	case map[string]any:
		out := make([]any, 0, len(c))
		for _, k := range sortedKeys(c) {
			out = append(out, map[string]any{kn: k, vn: c[k]})
		}
		return out, nil
	case []any:
		out := make([]any, len(c))
		for i, v := range c {
			out[i] = map[string]any{kn: float64(i), vn: v}
		}
		return out, nil
	}
	return nil, errors.New("items: expected an object or an array")
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
