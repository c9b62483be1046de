package variables

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	jmespath "github.com/jmespath-community/go-jmespath/pkg/api"
	"github.com/jmespath-community/go-jmespath/pkg/parsing"
)

// ErrUnresolved is matched (errors.Is) by the errors of variables whose path
// is not in the data: a missing map key, as Kyverno's "Unknown key" error.
var ErrUnresolved = errors.New("variable could not be resolved")

// VariableError is the error of one variable: it names the expression and
// where it sits in the substituted document ("" for a document that is the
// variable's string itself), in Kyverno's words.
type VariableError struct {
	Expr string
	Path string
	Err  error
}

func (e *VariableError) Error() string {
	return "failed to resolve " + e.Expr + " at path " + e.Path + ": " + e.Err.Error()
}

func (e *VariableError) Unwrap() error { return e.Err }

// notFoundError says which key of a path is missing.
type notFoundError struct{ key string }

func (e notFoundError) Error() string        { return fmt.Sprintf("Unknown key %q in path", e.key) }
func (e notFoundError) Is(target error) bool { return target == ErrUnresolved }

// expression is a compiled, cached JMESPath expression.
type expression struct {
	jp  jmespath.JMESPath
	err error
	// numeric: the expression compares, computes or calls functions, so the
	// numbers of the data must be float64 (the interpreter ignores int64 and
	// json.Number). A plain path reads data as it is.
	numeric bool
	// path is the data path a null result comes from, when the expression is
	// a simple path (or ends in an || of one): null there may mean "missing".
	path []step
	// roots are the names the expression reads from the top of the data;
	// readsRoot says it reads the top as a whole. Lazy values under those
	// names are loaded before it is evaluated.
	roots     []string
	readsRoot bool
	// required are the names of roots whose absence is an error: those read
	// anywhere but on the left of an "||" (whose right side is the default).
	required []string
}

// step is one field or index of a simple path.
type step struct {
	key   string
	index int
	isIdx bool
}

// The cache of compiled expressions: compiling costs far more than
// searching, and policies use the same few expressions on every resource.
// It is bounded; past the bound, expressions are compiled per use.
var (
	cache       sync.Map // string -> *expression
	cachedCount atomic.Int64
)

const maxCached = 16384

func compile(expr string) *expression {
	if e, ok := cache.Load(expr); ok {
		return e.(*expression)
	}
	e := compileUncached(expr)
	if cachedCount.Load() < maxCached {
		if _, loaded := cache.LoadOrStore(expr, e); !loaded {
			cachedCount.Add(1)
		}
	}
	return e
}

func compileUncached(expr string) (e *expression) {
	defer func() { // the lexer panics on some malformed input (invalid UTF-8): an error, never a crash
		if r := recover(); r != nil {
			e = &expression{err: fmt.Errorf("invalid JMESPath %q: %v", expr, r)}
		}
	}()
	if expr == "" {
		return &expression{err: errors.New("empty JMESPath expression")}
	}
	ast, err := parsing.NewParser().Parse(expr)
	if err != nil {
		return &expression{err: fmt.Errorf("invalid JMESPath %q: %w", expr, err)}
	}
	jp, err := jmespath.Compile(expr, functions()...)
	if err != nil {
		return &expression{err: fmt.Errorf("invalid JMESPath %q: %w", expr, err)}
	}
	e = &expression{jp: jp, numeric: isNumeric(ast), path: nullPath(ast)}
	rootReads(ast, &e.roots, &e.readsRoot)
	requiredReads(ast, &e.required)
	return e
}

// isNumeric reports whether evaluating the node may look at numbers.
func isNumeric(n parsing.ASTNode) bool {
	switch n.NodeType {
	case parsing.ASTComparator, parsing.ASTFunctionExpression, parsing.ASTArithmeticExpression,
		parsing.ASTArithmeticUnaryExpression, parsing.ASTExpRef:
		return true
	}
	for _, c := range n.Children {
		if isNumeric(c) {
			return true
		}
	}
	return false
}

// nullPath returns the path whose absence a null result of n would come
// from: n itself when it is a simple path, the right side of an ||.
func nullPath(n parsing.ASTNode) []step {
	switch n.NodeType {
	case parsing.ASTOrExpression:
		if len(n.Children) == 2 {
			return nullPath(n.Children[1])
		}
		return nil
	}
	var out []step
	if !simplePath(n, &out) {
		return nil
	}
	if len(out) == 1 && !out[0].isIdx && out[0].key == "" {
		// "" is JMESPath's quoted identifier of an empty name, which
		// policies write meaning an empty default ("{{ a || \"\" }}"): no
		// variable has that name, and Kyverno's tests expect the default,
		// not an unknown key (issue 40).
		return nil
	}
	return out
}

func simplePath(n parsing.ASTNode, out *[]step) bool {
	switch n.NodeType {
	case parsing.ASTField:
		key, ok := n.Value.(string)
		*out = append(*out, step{key: key})
		return ok
	case parsing.ASTSubexpression, parsing.ASTIndexExpression:
		for _, c := range n.Children {
			if !simplePath(c, out) {
				return false
			}
		}
		return true
	case parsing.ASTIndex:
		i, ok := n.Value.(int)
		*out = append(*out, step{index: i, isIdx: true})
		return ok
	case parsing.ASTCurrentNode, parsing.ASTIdentity:
		return true
	}
	return false
}

// missingRoot returns the first name the expression requires from the top
// of data that data lacks: a variable nothing defines ("{{ foo == 'x' }}"),
// which Kyverno reports as an unknown key wherever it is read.
func (e *expression) missingRoot(data map[string]any) (string, bool) {
	for _, name := range e.required {
		if _, ok := data[name]; !ok {
			return name, true
		}
	}
	return "", false
}

// missingKey walks a simple path through data and returns the first map key
// that is absent. A null (or non-object) value on the way is not missing:
// Kyverno yields null there, not an error.
func missingKey(path []step, data any) (string, bool) {
	cur := data
	for _, s := range path {
		if s.isIdx {
			l, ok := cur.([]any)
			if !ok {
				return "", false
			}
			i := s.index
			if i < 0 {
				i += len(l)
			}
			if i < 0 || i >= len(l) {
				return "", false
			}
			cur = l[i]
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		v, ok := m[s.key]
		if !ok {
			return s.key, true
		}
		cur = v
	}
	return "", false
}

// Query evaluates a JMESPath expression (the jmespath-community dialect plus
// Kyverno's custom functions) against data. Numbers in data may be float64,
// int, int64 or json.Number: expressions that compare, compute or call
// functions read them as float64 (their results carry float64); a plain
// path returns the data as it is, not copied. A null result is returned as
// nil without error; see Substitute for how variables treat it. Query never
// panics.
func Query(expr string, data any) (any, error) {
	e := compile(strings.TrimSpace(expr))
	if e.err != nil {
		return nil, e.err
	}
	if m, ok := data.(map[string]any); ok {
		if _, err := e.resolveLazy(m); err != nil {
			return nil, &VariableError{Expr: strings.TrimSpace(expr), Err: err}
		}
	}
	if e.numeric {
		data = Normalize(data)
	}
	return e.search(expr, data)
}

func (e *expression) search(expr string, data any) (result any, err error) {
	defer func() { // the interpreter may panic on unusual input: an error, never a crash
		if r := recover(); r != nil {
			result, err = nil, fmt.Errorf("JMESPath %q: %v", expr, r)
		}
	}()
	v, err := e.jp.Search(data)
	if err != nil {
		return nil, fmt.Errorf("JMESPath query failed: %w", err)
	}
	return v, nil
}

// Normalize returns v with every number as float64, the only number type
// the JMESPath interpreter knows. Containers are copied only when something
// in them changes, so already normalized data costs one walk and no
// allocation.
func Normalize(v any) any {
	out, _ := normalize(v)
	return out
}

func normalize(v any) (any, bool) {
	switch t := v.(type) {
	case map[string]any:
		var out map[string]any
		for k, val := range t {
			nv, changed := normalize(val)
			if !changed {
				continue
			}
			if out == nil {
				out = make(map[string]any, len(t))
				for k2, v2 := range t {
					out[k2] = v2
				}
			}
			out[k] = nv
		}
		if out == nil {
			return v, false
		}
		return out, true
	case []any:
		var out []any
		for i, val := range t {
			nv, changed := normalize(val)
			if !changed {
				continue
			}
			if out == nil {
				out = make([]any, len(t))
				copy(out, t)
			}
			out[i] = nv
		}
		if out == nil {
			return v, false
		}
		return out, true
	case float64, string, bool, nil:
		return v, false
	}
	if f, ok := ToFloat(v); ok {
		return f, true
	}
	return v, false
}

// ToFloat reads any JSON number type as a float64.
func ToFloat(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case int:
		return float64(t), true
	case int64:
		return float64(t), true
	case int32:
		return float64(t), true
	case float32:
		return float64(t), true
	case uint64:
		return float64(t), true
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		return f, err == nil
	}
	return 0, false
}
