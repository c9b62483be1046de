// Package variables resolves Kyverno's {{ }} variables: JMESPath expressions
// (the jmespath-community dialect plus Kyverno's custom functions) evaluated
// against a JSON document such as {"request": {"object": ...}, "element": ...}.
package variables

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	jmespath "github.com/jmespath-community/go-jmespath/pkg/api"
)

// ErrUnresolved is wrapped by errors for variables that resolve to nothing.
var ErrUnresolved = errors.New("variable could not be resolved")

// cache holds compiled expressions: compiling costs far more than searching.
var cache sync.Map // string -> jmespath.JMESPath

// maxCached bounds the cache; past it, expressions are compiled per use.
const maxCached = 16384

var cached struct {
	sync.Mutex
	n int
}

func compile(expr string) (_ jmespath.JMESPath, err error) {
	if c, ok := cache.Load(expr); ok {
		return c.(jmespath.JMESPath), nil
	}
	defer func() { // the lexer panics on some malformed input (invalid UTF-8): an error, never a crash
		if r := recover(); r != nil {
			err = fmt.Errorf("invalid JMESPath %q: %v", expr, r)
		}
	}()
	c, err := jmespath.Compile(expr, functions()...)
	if err != nil {
		return nil, fmt.Errorf("invalid JMESPath %q: %w", expr, err)
	}
	cached.Lock()
	if cached.n < maxCached {
		cached.n++
		cache.Store(expr, c)
	}
	cached.Unlock()
	return c, nil
}

// Query evaluates a JMESPath expression against data.
func Query(expr string, data any) (result any, err error) {
	c, err := compile(strings.TrimSpace(expr))
	if err != nil {
		return nil, err
	}
	defer func() { // the interpreter may panic on unusual input: an error, never a crash
		if r := recover(); r != nil {
			result, err = nil, fmt.Errorf("JMESPath %q: %v", expr, r)
		}
	}()
	return c.Search(data)
}

// Mode says how unresolved variables are treated.
type Mode int

const (
	// Strict: a variable that resolves to null is an error (patterns, messages).
	Strict Mode = iota
	// Lenient: a variable that resolves to null becomes null (conditions,
	// where Kyverno compares missing values as empty).
	Lenient
)

// Substitute returns a copy of v with every {{ expr }} in its strings (map
// keys included) replaced, in Strict mode.
func Substitute(v any, data map[string]any) (any, error) { return SubstituteMode(v, data, Strict) }

// SubstituteMode is Substitute with a choice of mode. A value without
// variables is returned as it is, not copied.
func SubstituteMode(v any, data map[string]any, mode Mode) (any, error) {
	if !HasVariables(v) {
		return v, nil
	}
	return substitute(v, data, mode)
}

// HasVariables reports whether any string of v (map keys included) holds "{{".
func HasVariables(v any) bool {
	switch t := v.(type) {
	case string:
		return strings.Contains(t, "{{")
	case map[string]any:
		for k, val := range t {
			if strings.Contains(k, "{{") || HasVariables(val) {
				return true
			}
		}
	case []any:
		for _, val := range t {
			if HasVariables(val) {
				return true
			}
		}
	}
	return false
}

func substitute(v any, data map[string]any, mode Mode) (any, error) {
	switch t := v.(type) {
	case string:
		if !strings.Contains(t, "{{") {
			return t, nil
		}
		return substituteValue(t, data, mode)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			nk := k
			if strings.Contains(k, "{{") {
				s, err := substituteString(k, data, mode)
				if err != nil {
					return nil, err
				}
				nk = s
			}
			nv, err := substitute(val, data, mode)
			if err != nil {
				return nil, err
			}
			out[nk] = nv
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			nv, err := substitute(val, data, mode)
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	}
	return v, nil
}

// SubstituteString substitutes the variables of a string (Strict), always
// producing a string.
func SubstituteString(s string, data map[string]any) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	return substituteString(s, data, Strict)
}

// span is one {{ }} of a string: [start, end) and its expression.
type span struct {
	start, end int
	expr       string
	escaped    bool
}

// spans finds the innermost variables of s: a {{ }} holding no other {{.
// Single braces inside an expression (JMESPath multiselect hashes) nest;
// "\{{" escapes a variable. Outer variables are found once the inner ones
// are substituted (see substituteString).
func spans(s string) []span {
	var out []span
	for i := 0; i+1 < len(s); {
		j := strings.Index(s[i:], "{{")
		if j < 0 {
			break
		}
		start := i + j
		depth, end, nested := 0, -1, false
		for k := start + 2; k < len(s) && end < 0 && !nested; k++ {
			switch {
			case s[k] == '{' && k+1 < len(s) && s[k+1] == '{':
				nested = true
			case s[k] == '{':
				depth++
			case s[k] == '}' && depth > 0:
				depth--
			case s[k] == '}' && k+1 < len(s) && s[k+1] == '}':
				end = k + 2
			}
		}
		if nested {
			i = start + 1 // an inner variable starts later: look from there
			continue
		}
		if end < 0 {
			break
		}
		sp := span{start: start, end: end, expr: strings.TrimSpace(s[start+2 : end-2])}
		if start > 0 && s[start-1] == '\\' {
			sp.escaped = true
		}
		out = append(out, sp)
		i = end
	}
	return out
}

// References returns the expressions a value refers to.
func References(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			for _, sp := range spans(t) {
				if !sp.escaped {
					out = append(out, sp.expr)
				}
			}
		case map[string]any:
			for k, val := range t {
				walk(k)
				walk(val)
			}
		case []any:
			for _, val := range t {
				walk(val)
			}
		}
	}
	walk(v)
	return out
}

func resolve(expr string, data map[string]any, mode Mode) (any, error) {
	v, err := Query(expr, data)
	if err != nil {
		if mode == Lenient {
			return nil, nil
		}
		return nil, fmt.Errorf("variable %s: %w", expr, err)
	}
	if v == nil && mode == Strict {
		return nil, fmt.Errorf("%w: %s", ErrUnresolved, expr)
	}
	return v, nil
}

// substituteValue keeps the type of a lone variable.
func substituteValue(s string, data map[string]any, mode Mode) (any, error) {
	for {
		sps := spans(s)
		if len(sps) == 0 {
			return unescape(s), nil
		}
		if len(sps) == 1 && !sps[0].escaped && sps[0].start == 0 && sps[0].end == len(s) {
			return resolve(sps[0].expr, data, mode)
		}
		next, changed, err := substituteOnce(s, sps, data, mode)
		if err != nil {
			return nil, err
		}
		if !changed {
			return unescape(next), nil
		}
		s = next
	}
}

func substituteString(s string, data map[string]any, mode Mode) (string, error) {
	for {
		sps := spans(s)
		next, changed, err := substituteOnce(s, sps, data, mode)
		if err != nil {
			return "", err
		}
		if !changed {
			return unescape(next), nil
		}
		s = next
	}
}

// substituteOnce replaces the given innermost variables; escaped ones are
// kept (with their backslash) for unescape to finish.
func substituteOnce(s string, sps []span, data map[string]any, mode Mode) (string, bool, error) {
	var b strings.Builder
	last, changed := 0, false
	for _, sp := range sps {
		if sp.escaped {
			continue
		}
		b.WriteString(s[last:sp.start])
		v, err := resolve(sp.expr, data, mode)
		if err != nil {
			return "", false, err
		}
		b.WriteString(format(v))
		last, changed = sp.end, true
	}
	b.WriteString(s[last:])
	return b.String(), changed, nil
}

// unescape turns "\{{" into "{{".
func unescape(s string) string {
	if !strings.Contains(s, "\\{{") {
		return s
	}
	return strings.ReplaceAll(s, "\\{{", "{{")
}

// format renders a value inside a string: strings as they are, numbers
// without a trailing .0, everything else as JSON.
func format(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case int:
		return strconv.Itoa(t)
	case int64:
		return strconv.FormatInt(t, 10)
	case bool:
		return strconv.FormatBool(t)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}
