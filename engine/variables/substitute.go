package variables

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Mode says how a variable that cannot be resolved is treated.
type Mode int

const (
	// Strict is for patterns, messages and context entries: a variable whose
	// path is missing from the data, or whose expression fails, is an error
	// (Kyverno reports the rule as an error: "variable substitution failed").
	Strict Mode = iota
	// Lenient is for preconditions and deny conditions: such a variable
	// becomes the empty string, as Kyverno does for conditions. A malformed
	// expression is still an error.
	Lenient
)

// maxRounds bounds nested substitution: a value that substitutes to a
// string holding variables is substituted again, up to this many times.
const maxRounds = 32

// Substitute returns v (any JSON value: pattern, message, condition key or
// value) with every "{{ expr }}" in its strings, map keys included, replaced
// from data, and every "$(./relative/path)" reference resolved first (see
// ResolveReferences). Unresolved variables are errors (Strict mode).
//
// A string that is exactly one variable becomes the typed result (object,
// number, bool, null); a variable inside a longer string is formatted into
// it (numbers without a trailing .0, objects and lists as JSON, null as
// "null"). Variables nest ("{{ a.{{ b }} }}" resolves b first); "\{{"
// escapes a variable; "{{- expr }}" substitutes once, without resolving
// variables held in the result. "{{ @ }}" is the value of the resource at
// the same path as the string in v: request.object.<path> (target.<path>
// when data has a "target"). In a DELETE request (request.operation),
// request.object in expressions reads request.oldObject.
//
// Parts of v without variables are shared with v, not copied.
func Substitute(v any, data map[string]any) (any, error) { return SubstituteMode(v, data, Strict) }

// SubstituteMode is Substitute with a choice of mode.
func SubstituteMode(v any, data map[string]any, mode Mode) (any, error) {
	if !HasVariables(v) {
		return v, nil
	}
	if hasReferences(v) {
		var err error
		if v, err = ResolveReferences(v); err != nil {
			return nil, err
		}
	}
	s := newSubstituter(data, mode)
	return s.value(v)
}

// Substituter substitutes many values against the same data, sharing the
// work they have in common (the float64 copy of the data that numeric
// expressions read). It is not safe for concurrent use, and the data must
// not change while it is in use.
type Substituter struct{ s *substituter }

// NewSubstituter returns a Substituter for data in the given mode.
func NewSubstituter(data map[string]any, mode Mode) *Substituter {
	return &Substituter{s: newSubstituter(data, mode)}
}

// Substitute is SubstituteMode with the Substituter's data and mode.
func (u *Substituter) Substitute(v any) (any, error) {
	if !HasVariables(v) {
		return v, nil
	}
	if hasReferences(v) {
		var err error
		if v, err = ResolveReferences(v); err != nil {
			return nil, err
		}
	}
	u.s.path = u.s.path[:0]
	return u.s.value(v)
}

// String is SubstituteStringMode with the Substituter's data and mode.
func (u *Substituter) String(str string) (string, error) {
	if !strings.Contains(str, "{{") {
		return str, nil
	}
	return u.s.text(str)
}

// SubstituteString substitutes the variables of a string (Strict), always
// producing a string.
func SubstituteString(s string, data map[string]any) (string, error) {
	return SubstituteStringMode(s, data, Strict)
}

// SubstituteStringMode is SubstituteString with a choice of mode.
func SubstituteStringMode(s string, data map[string]any, mode Mode) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	return newSubstituter(data, mode).text(s)
}

// HasVariables reports whether any string of v (map keys included) holds a
// "{{" variable or a "$(./...)" reference.
func HasVariables(v any) bool {
	switch t := v.(type) {
	case string:
		return strings.Contains(t, "{{") || strings.Contains(t, "$(")
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

// References returns the expressions the variables of v refer to, outer
// ones included ("{{ a.{{ b }} }}" gives "a.{{ b }}" and "b"), escaped ones
// excluded, for policy validation (a background policy may not read
// request.userInfo, for example).
func References(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			for _, sp := range allSpans(t) {
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

// substituter carries what one substitution needs.
type substituter struct {
	data     map[string]any
	mode     Mode
	numeric  any   // data with float64 numbers, made on first need
	path     []any // the position in the substituted value: keys and indexes, for {{ @ }}
	isDelete bool
	shallow  []string // texts of {{- }} variables, held out of rescans
	canHold  bool
}

func newSubstituter(data map[string]any, mode Mode) *substituter {
	s := &substituter{data: data, mode: mode}
	if req, ok := data["request"].(map[string]any); ok {
		s.isDelete = req["operation"] == "DELETE"
	}
	return s
}

func (s *substituter) value(v any) (any, error) {
	switch t := v.(type) {
	case string:
		if !strings.Contains(t, "{{") {
			return t, nil
		}
		return s.typed(t)
	case map[string]any:
		if !HasVariables(t) {
			return t, nil
		}
		out := make(map[string]any, len(t))
		for k, val := range t {
			nk := k
			if strings.Contains(k, "{{") {
				var err error
				if nk, err = s.text(k); err != nil {
					return nil, err
				}
			}
			s.path = append(s.path, k)
			nv, err := s.value(val)
			s.path = s.path[:len(s.path)-1]
			if err != nil {
				return nil, err
			}
			out[nk] = nv
		}
		return out, nil
	case []any:
		if !HasVariables(t) {
			return t, nil
		}
		out := make([]any, len(t))
		for i, val := range t {
			s.path = append(s.path, i)
			nv, err := s.value(val)
			s.path = s.path[:len(s.path)-1]
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	}
	return v, nil
}

// typed substitutes a string; a string that is (or becomes, once inner
// variables are substituted) exactly one variable gives its typed value.
func (s *substituter) typed(str string) (any, error) {
	s.begin(str)
	for round := 0; ; round++ {
		if round == maxRounds {
			return nil, fmt.Errorf("variables in %q nest more than %d levels deep", str, maxRounds)
		}
		sps := spans(str)
		if len(sps) == 1 && !sps[0].escaped && sps[0].start == 0 && sps[0].end == len(str) {
			return s.resolve(sps[0].expr)
		}
		next, changed, err := s.once(str, sps)
		if err != nil {
			return nil, err
		}
		if !changed {
			return s.finish(next), nil
		}
		str = next
	}
}

// text substitutes a string, always producing a string.
func (s *substituter) text(str string) (string, error) {
	s.begin(str)
	for round := 0; ; round++ {
		if round == maxRounds {
			return "", fmt.Errorf("variables in %q nest more than %d levels deep", str, maxRounds)
		}
		next, changed, err := s.once(str, spans(str))
		if err != nil {
			return "", err
		}
		if !changed {
			return s.finish(next), nil
		}
		str = next
	}
}

// once replaces the given innermost variables; escaped ones are kept (with
// their backslash) for finish to unescape.
func (s *substituter) once(str string, sps []span) (string, bool, error) {
	var b strings.Builder
	last, changed := 0, false
	for _, sp := range sps {
		if sp.escaped {
			continue
		}
		v, err := s.resolve(sp.expr)
		if err != nil {
			return "", false, err
		}
		if !changed {
			b.Grow(len(str))
		}
		b.WriteString(str[last:sp.start])
		text := format(v)
		if isShallow(sp.expr) && s.canHold && strings.Contains(text, "{{") {
			text = s.hold(text)
		}
		b.WriteString(text)
		last, changed = sp.end, true
	}
	if !changed {
		return str, false, nil
	}
	b.WriteString(str[last:])
	return b.String(), true, nil
}

// The text of a shallow variable ("{{- x }}") that holds "{{" is replaced
// by a placeholder "\x00<n>\x00" until the end, so that it is not searched
// for variables again. A string that already holds a NUL byte cannot use
// placeholders: its shallow variables are substituted deeply.
func (s *substituter) begin(str string) {
	s.shallow = s.shallow[:0]
	s.canHold = !strings.Contains(str, "\x00")
}

func (s *substituter) hold(text string) string {
	s.shallow = append(s.shallow, text)
	return "\x00" + strconv.Itoa(len(s.shallow)-1) + "\x00"
}

// finish unescapes "\{{" and puts shallow texts back.
func (s *substituter) finish(str string) string {
	if strings.Contains(str, `\{{`) {
		str = strings.ReplaceAll(str, `\{{`, "{{")
	}
	return s.expand(str)
}

// expand puts shallow texts back in place of their placeholders.
func (s *substituter) expand(str string) string {
	if len(s.shallow) == 0 || !strings.Contains(str, "\x00") {
		return str
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(str, 0)
		if i < 0 {
			break
		}
		j := strings.IndexByte(str[i+1:], 0)
		if j < 0 {
			break
		}
		b.WriteString(str[:i])
		if n, err := strconv.Atoi(str[i+1 : i+1+j]); err == nil && n >= 0 && n < len(s.shallow) {
			b.WriteString(s.shallow[n])
		} else {
			b.WriteString(str[i : i+j+2])
		}
		str = str[i+j+2:]
	}
	b.WriteString(str)
	return b.String()
}

func isShallow(expr string) bool { return strings.HasPrefix(expr, "-") }

// resolve evaluates one variable's expression.
func (s *substituter) resolve(expr string) (any, error) {
	expr = strings.TrimSpace(strings.TrimPrefix(expr, "-"))
	expr = s.expand(expr)
	if expr == "@" {
		expr = s.currentPath()
	}
	if s.isDelete && strings.Contains(expr, "request.object") {
		expr = oldObject(expr)
	}
	e := compile(expr)
	if e.err != nil {
		return nil, &VariableError{Expr: expr, Path: s.pointer(), Err: e.err}
	}
	if replaced, err := e.resolveLazy(s.data); err != nil {
		// A context entry that fails to load is an error in every mode.
		return nil, &VariableError{Expr: expr, Path: s.pointer(), Err: err}
	} else if replaced {
		s.numeric = nil
	}
	data := any(s.data)
	if e.numeric {
		if s.numeric == nil {
			s.numeric = Normalize(s.data)
		}
		data = s.numeric
	}
	if key, missing := e.missingRoot(s.data); missing {
		return s.unresolved(expr, fmt.Errorf("JMESPath query failed: %w", notFoundError{key: key}))
	}
	v, err := e.search(expr, data)
	if err == nil && v == nil && e.path != nil {
		if key, missing := missingKey(e.path, data); missing {
			err = fmt.Errorf("JMESPath query failed: %w", notFoundError{key: key})
		}
	}
	if err != nil {
		return s.unresolved(expr, err)
	}
	return v, nil
}

// unresolved is the outcome of a variable whose expression failed: an error
// naming it and where it is, or "" in Lenient mode.
func (s *substituter) unresolved(expr string, err error) (any, error) {
	if s.mode == Lenient {
		return "", nil // Kyverno substitutes "" for what conditions cannot resolve
	}
	var ve *VariableError
	if errors.As(err, &ve) {
		return nil, err
	}
	return nil, &VariableError{Expr: expr, Path: s.pointer(), Err: err}
}

// oldObject rewrites request.object (not request.objectX) to request.oldObject.
func oldObject(expr string) string {
	const from = "request.object"
	var b strings.Builder
	for {
		i := strings.Index(expr, from)
		if i < 0 {
			break
		}
		end := i + len(from)
		b.WriteString(expr[:i])
		if end < len(expr) && isIdentChar(expr[end]) {
			b.WriteString(from)
		} else {
			b.WriteString("request.oldObject")
		}
		expr = expr[end:]
	}
	b.WriteString(expr)
	return b.String()
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// pointer is the position of the substituted value in the document, as a
// slash-separated path ("" at the top).
func (s *substituter) pointer() string {
	var b strings.Builder
	for _, p := range s.path {
		switch t := p.(type) {
		case int:
			b.WriteString("/" + strconv.Itoa(t))
		case string:
			b.WriteString("/" + t)
		}
	}
	return b.String()
}

// currentPath is the JMESPath of the resource field at the substituted
// value's position: pattern keys lose their anchors.
func (s *substituter) currentPath() string {
	var b strings.Builder
	if _, ok := s.data["target"]; ok {
		b.WriteString("target")
	} else {
		b.WriteString("request.object")
	}
	for _, p := range s.path {
		switch t := p.(type) {
		case int:
			b.WriteString("[" + strconv.Itoa(t) + "]")
		case string:
			b.WriteString("." + strconv.Quote(stripAnchor(t)))
		}
	}
	return b.String()
}

// stripAnchor turns "(name)", "=(name)", "^(name)", "X(name)", "<(name)" or
// "+(name)" into "name".
func stripAnchor(k string) string {
	if len(k) >= 2 && k[len(k)-1] == ')' {
		if k[0] == '(' {
			return k[1 : len(k)-1]
		}
		if len(k) >= 3 && k[1] == '(' && strings.IndexByte("=^X<+", k[0]) >= 0 {
			return k[2 : len(k)-1]
		}
	}
	return k
}

// span is one {{ }} of a string: [start, end) and its expression.
type span struct {
	start, end int
	expr       string
	escaped    bool
}

// spans finds the innermost variables of s: a {{ }} holding no other {{.
// Single braces inside an expression (JMESPath multiselect hashes, JSON
// literals) nest; "\{{" escapes a variable. Outer variables are found once
// the inner ones are substituted.
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
			case s[k] == '{' && k+1 < len(s) && s[k+1] == '{' && depth == 0:
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
		out = append(out, span{
			start:   start,
			end:     end,
			expr:    strings.TrimSpace(s[start+2 : end-2]),
			escaped: start > 0 && s[start-1] == '\\',
		})
		i = end
	}
	return out
}

// allSpans finds every variable of s, outer ones included.
func allSpans(s string) []span {
	var out []span
	var stack []int
	depth := 0 // single braces open inside the innermost variable
	for k := 0; k < len(s); k++ {
		switch {
		case s[k] == '{' && k+1 < len(s) && s[k+1] == '{' && depth == 0:
			stack = append(stack, k)
			k++
		case s[k] == '{' && len(stack) > 0:
			depth++
		case s[k] == '}' && depth > 0:
			depth--
		case s[k] == '}' && k+1 < len(s) && s[k+1] == '}' && len(stack) > 0:
			start := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			out = append(out, span{
				start:   start,
				end:     k + 2,
				expr:    strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s[start+2:k]), "-")),
				escaped: start > 0 && s[start-1] == '\\',
			})
			k++
		}
	}
	return out
}

// format renders a value inside a string as Kyverno does: strings as they
// are, everything else as JSON (numbers without a trailing .0, null as
// "null").
func format(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(t)
	case int:
		return strconv.Itoa(t)
	case int64:
		return strconv.FormatInt(t, 10)
	case json.Number:
		return string(t)
	}
	if f, ok := ToFloat(v); ok {
		return formatFloat(f)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// formatFloat writes a number as encoding/json does.
func formatFloat(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// CheckSyntax reports the first variable of v whose JMESPath expression does
// not parse, naming it, so that a policy carrying it can be rejected at load
// time. Expressions built from nested variables ("{{ a.{{ b }} }}") are
// known only at evaluation and are not checked.
func CheckSyntax(v any) error {
	for _, expr := range References(v) {
		if strings.Contains(expr, "{{") {
			continue
		}
		e := strings.TrimSpace(expr)
		e = strings.TrimSpace(strings.TrimPrefix(e, "-"))
		if e == "" || e == "@" {
			continue
		}
		if c := compile(e); c.err != nil {
			return fmt.Errorf("variable {{ %s }}: %w", strings.TrimSpace(expr), c.err)
		}
	}
	return nil
}
