package variables

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	jpfunctions "github.com/jmespath-community/go-jmespath/pkg/functions"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/engine/wildcard"
)

var (
	functionsOnce sync.Once
	functionList  []jpfunctions.FunctionEntry
)

// Argument types, shortened for the table below.
const (
	tString = jpfunctions.JpString
	tNumber = jpfunctions.JpNumber
	tArray  = jpfunctions.JpArray
	tObject = jpfunctions.JpObject
	tAny    = jpfunctions.JpAny
)

func arg(t ...jpfunctions.JpType) jpfunctions.ArgSpec { return jpfunctions.ArgSpec{Types: t} }

func opt(t ...jpfunctions.JpType) jpfunctions.ArgSpec {
	return jpfunctions.ArgSpec{Types: t, Optional: true}
}

func fn(name string, h jpfunctions.JpFunction, args ...jpfunctions.ArgSpec) jpfunctions.FunctionEntry {
	return jpfunctions.FunctionEntry{Name: name, Arguments: args, Handler: h}
}

// FunctionNames lists Kyverno's custom JMESPath functions, sorted.
func FunctionNames() []string {
	var out []string
	for _, f := range functions() {
		out = append(out, f.Name)
	}
	sort.Strings(out)
	return out
}

// functions are Kyverno's custom JMESPath functions, registered after the
// standard library: where a name exists in both (items, replace, split,
// sum, trim), Kyverno's meaning wins.
func functions() []jpfunctions.FunctionEntry {
	functionsOnce.Do(func() {
		functionList = []jpfunctions.FunctionEntry{
			// Strings.
			fn("compare", strings2(func(a, b string) (any, error) { return float64(strings.Compare(a, b)), nil }), arg(tString), arg(tString)),
			fn("equal_fold", strings2(func(a, b string) (any, error) { return strings.EqualFold(a, b), nil }), arg(tString), arg(tString)),
			fn("replace", jpReplace, arg(tString), arg(tString), arg(tString), opt(tNumber)),
			fn("replace_all", func(a []any) (any, error) { return strings.ReplaceAll(str(a[0]), str(a[1]), str(a[2])), nil },
				arg(tString), arg(tString), arg(tString)),
			fn("to_upper", strings1(strings.ToUpper), arg(tString)),
			fn("to_lower", strings1(strings.ToLower), arg(tString)),
			fn("trim", jpTrim, arg(tString), opt(tString)),
			fn("trim_prefix", strings2(func(a, b string) (any, error) { return strings.TrimPrefix(a, b), nil }), arg(tString), arg(tString)),
			fn("split", jpSplit, arg(tString), arg(tString)),
			fn("truncate", jpTruncate, arg(tString), arg(tNumber)),
			fn("path_canonicalize", strings1(canonicalPath), arg(tString)),
			fn("to_boolean", jpToBoolean, arg(tString)),
			// Regular expressions and wildcards.
			fn("regex_replace_all", jpRegexReplace(false), arg(tString), arg(tString, tNumber), arg(tString, tNumber)),
			fn("regex_replace_all_literal", jpRegexReplace(true), arg(tString), arg(tString, tNumber), arg(tString, tNumber)),
			fn("regex_match", jpRegexMatch, arg(tString), arg(tString, tNumber)),
			fn("pattern_match", func(a []any) (any, error) { return wildcard.Match(str(a[0]), scalarString(a[1])), nil },
				arg(tString), arg(tString, tNumber)),
			fn("label_match", jpLabelMatch, arg(tObject), arg(tObject)),
			// Arithmetic on numbers, quantities and durations.
			fn("add", arithmetic(opAdd), arg(tAny), arg(tAny)),
			fn("subtract", arithmetic(opSubtract), arg(tAny), arg(tAny)),
			fn("multiply", arithmetic(opMultiply), arg(tAny), arg(tAny)),
			fn("divide", arithmetic(opDivide), arg(tAny), arg(tAny)),
			fn("modulo", arithmetic(opModulo), arg(tAny), arg(tAny)),
			fn("sum", jpSum, arg(tArray)),
			fn("round", jpRound, arg(tNumber), arg(tNumber)),
			// Encodings and hashes.
			fn("base64_decode", jpBase64Decode, arg(tString)),
			fn("base64_encode", strings1(func(v string) string { return base64.StdEncoding.EncodeToString([]byte(v)) }), arg(tString)),
			fn("sha256", strings1(func(v string) string { h := sha256.Sum256([]byte(v)); return hex.EncodeToString(h[:]) }), arg(tString)),
			fn("md5", strings1(func(v string) string { h := md5.Sum([]byte(v)); return hex.EncodeToString(h[:]) }), arg(tString)),
			fn("parse_json", jpParseJSON, arg(tString)),
			fn("parse_yaml", jpParseYAML, arg(tString)),
			fn("x509_decode", jpX509Decode, arg(tString)),
			// Time.
			fn("time_since", jpTimeSince, arg(tString), arg(tString), arg(tString)),
			fn("time_now", func([]any) (any, error) { return now().Format(rfc3339), nil }),
			fn("time_now_utc", func([]any) (any, error) { return now().UTC().Format(rfc3339), nil }),
			fn("time_add", jpTimeAdd, arg(tString), arg(tString)),
			fn("time_parse", jpTimeParse, arg(tString), arg(tString)),
			fn("time_to_cron", jpTimeToCron, arg(tString)),
			fn("time_utc", jpTimeUTC, arg(tString)),
			fn("time_diff", jpTimeDiff, arg(tString), arg(tString)),
			fn("time_before", timeCompare(func(a, b int) bool { return a < b }), arg(tString), arg(tString)),
			fn("time_after", timeCompare(func(a, b int) bool { return a > b }), arg(tString), arg(tString)),
			fn("time_between", jpTimeBetween, arg(tString), arg(tString), arg(tString)),
			fn("time_truncate", jpTimeTruncate, arg(tString), arg(tString)),
			// Versions, collections, and the rest.
			fn("semver_compare", jpSemverCompare, arg(tString), arg(tString)),
			fn("lookup", jpLookup, arg(tObject, tArray), arg(tString, tNumber)),
			fn("items", jpItems, arg(tObject, tArray), opt(tString), opt(tString)),
			fn("object_from_lists", jpObjectFromLists, arg(tArray), arg(tArray)),
			fn("random", jpRandom, arg(tString)),
			fn("image_normalize", jpImageNormalize, arg(tString)),
			fn("is_external_url", jpIsExternalURL, arg(tString)),
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

func strings1(f func(string) string) jpfunctions.JpFunction {
	return func(a []any) (any, error) { return f(str(a[0])), nil }
}

func strings2(f func(a, b string) (any, error)) jpfunctions.JpFunction {
	return func(a []any) (any, error) { return f(str(a[0]), str(a[1])) }
}

// integer reads a number argument that must be a whole number.
func integer(name string, v any) (int, error) {
	f, _ := ToFloat(v)
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("%s: %v is not an integer", name, v)
	}
	return int(f), nil
}

// jpReplace: replace(str, old, new, n): the first n occurrences, all if n
// is negative or absent.
func jpReplace(a []any) (any, error) {
	n := -1
	if len(a) > 3 {
		var err error
		if n, err = integer("replace", a[3]); err != nil {
			return nil, err
		}
	}
	return strings.Replace(str(a[0]), str(a[1]), str(a[2]), n), nil
}

// jpTrim: trim(str, cutset) strips the characters of cutset from both ends;
// without a cutset, white space.
func jpTrim(a []any) (any, error) {
	if len(a) > 1 {
		return strings.Trim(str(a[0]), str(a[1])), nil
	}
	return strings.TrimSpace(str(a[0])), nil
}

func jpSplit(a []any) (any, error) {
	parts := strings.Split(str(a[0]), str(a[1]))
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// jpTruncate keeps the first n characters (runes) of a string.
func jpTruncate(a []any) (any, error) {
	n, err := integer("truncate", a[1])
	if err != nil {
		return nil, err
	}
	s := str(a[0])
	if n <= 0 {
		return "", nil
	}
	if utf8.RuneCountInString(s) <= n {
		return s, nil
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos], nil
		}
		i++
	}
	return s, nil
}

// canonicalPath removes repeated slashes and "." / ".." elements, as an
// operating system would read the path.
func canonicalPath(p string) string {
	if p == "" {
		return ""
	}
	return path.Clean(p)
}

func jpToBoolean(a []any) (any, error) {
	switch strings.ToLower(str(a[0])) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return nil, fmt.Errorf("to_boolean: %q is neither true nor false", str(a[0]))
}

var regexCache sync.Map // string -> *regexp.Regexp

const maxRegexCached = 4096

var regexCount sync.Mutex
var regexCached int

func regex(expr string) (*regexp.Regexp, error) {
	if r, ok := regexCache.Load(expr); ok {
		return r.(*regexp.Regexp), nil
	}
	r, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression %q: %w", expr, err)
	}
	regexCount.Lock()
	if regexCached < maxRegexCached {
		regexCached++
		regexCache.Store(expr, r)
	}
	regexCount.Unlock()
	return r, nil
}

func jpRegexMatch(a []any) (any, error) {
	re, err := regex(str(a[0]))
	if err != nil {
		return nil, fmt.Errorf("regex_match: %w", err)
	}
	return re.MatchString(scalarString(a[1])), nil
}

func jpRegexReplace(literal bool) jpfunctions.JpFunction {
	return func(a []any) (any, error) {
		re, err := regex(str(a[0]))
		if err != nil {
			return nil, err
		}
		src, repl := scalarString(a[1]), scalarString(a[2])
		if literal {
			return re.ReplaceAllLiteralString(src, repl), nil
		}
		return re.ReplaceAllString(src, repl), nil
	}
}

// jpLabelMatch: every label of the first object is in the second with the
// same value.
func jpLabelMatch(a []any) (any, error) {
	sel, _ := a[0].(map[string]any)
	lbls, _ := a[1].(map[string]any)
	for k, v := range sel {
		got, ok := lbls[k]
		if !ok || scalarString(got) != scalarString(v) {
			return false, nil
		}
	}
	return true, nil
}

// jpRound: round(number, places), half away from zero.
func jpRound(a []any) (any, error) {
	places, err := integer("round", a[1])
	if err != nil {
		return nil, err
	}
	if places < 0 {
		return nil, errors.New("round: the number of places must not be negative")
	}
	f, _ := ToFloat(a[0])
	if places > 15 {
		return f, nil
	}
	p := math.Pow10(places)
	return math.Round(f*p) / p, nil
}

func jpBase64Decode(a []any) (any, error) {
	b, err := base64.StdEncoding.DecodeString(str(a[0]))
	if err != nil {
		return nil, fmt.Errorf("base64_decode: %w", err)
	}
	return string(b), nil
}

func jpParseJSON(a []any) (any, error) {
	var v any
	if err := json.Unmarshal([]byte(str(a[0])), &v); err != nil {
		return nil, fmt.Errorf("parse_json: %w", err)
	}
	return v, nil
}

func jpParseYAML(a []any) (any, error) {
	var v any
	if err := yaml.Unmarshal([]byte(str(a[0])), &v); err != nil {
		return nil, fmt.Errorf("parse_yaml: %w", err)
	}
	return Normalize(v), nil
}

// jpLookup: the value of a key of an object or of an index of an array,
// null when there is none.
func jpLookup(a []any) (any, error) {
	switch c := a[0].(type) {
	case map[string]any:
		k, ok := a[1].(string)
		if !ok {
			return nil, errors.New("lookup: an object's key must be a string")
		}
		return c[k], nil
	case []any:
		i, err := integer("lookup", a[1])
		if _, isNum := a[1].(float64); !isNum || err != nil {
			return nil, errors.New("lookup: an array's index must be an integer")
		}
		if i < 0 || i >= len(c) {
			return nil, nil
		}
		return c[i], nil
	}
	return nil, errors.New("lookup: the first argument must be an object or an array")
}

// jpItems: items(object, keyName, valueName) gives [{keyName: k,
// valueName: v}] sorted by key; items(array, ...) [{keyName: index,
// valueName: v}]; with one argument, the standard [[k, v]] pairs.
func jpItems(a []any) (any, error) {
	if len(a) == 1 {
		m, ok := a[0].(map[string]any)
		if !ok {
			return nil, errors.New("items: expected an object")
		}
		out := make([]any, 0, len(m))
		for _, k := range sortedKeys(m) {
			out = append(out, []any{k, m[k]})
		}
		return out, nil
	}
	kn, vn := str(a[1]), "value"
	if len(a) > 2 {
		vn = str(a[2])
	}
	switch c := a[0].(type) {
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

// jpObjectFromLists pairs keys with values; missing values are null.
func jpObjectFromLists(a []any) (any, error) {
	keys, _ := a[0].([]any)
	vals, _ := a[1].([]any)
	out := make(map[string]any, len(keys))
	for i, k := range keys {
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("object_from_lists: key %v is not a string", k)
		}
		var v any
		if i < len(vals) {
			v = vals[i]
		}
		out[ks] = v
	}
	return out, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
