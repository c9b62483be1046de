package variables

import (
	"fmt"

	"github.com/jmespath-community/go-jmespath/pkg/parsing"
)

// Lazy is a value loaded when a variable first reads it, as Kyverno loads
// context entries: a rule whose preconditions never read an entry never
// loads it, and a load that fails is the error of the variable that read
// it ("failed to resolve status at path : failed to fetch data for
// APICall: ..."), in every mode. Put one in the data as a top-level value;
// Substitute and Query replace it by its value when an expression reads
// that name. A Lazy loads at most once. It is not safe for concurrent use
// (nor is the data it sits in).
type Lazy struct {
	name    string
	load    func() (any, error)
	loading bool
	done    bool
	val     any
	err     error
}

// NewLazy returns a Lazy for the named value that load produces.
func NewLazy(name string, load func() (any, error)) *Lazy {
	return &Lazy{name: name, load: load}
}

// Value loads the value, once.
func (l *Lazy) Value() (any, error) {
	if l.done {
		return l.val, l.err
	}
	if l.loading {
		return nil, fmt.Errorf("context entry %s reads itself", l.name)
	}
	l.loading = true
	l.val, l.err = l.load()
	l.loading, l.done = false, true
	return l.val, l.err
}

// resolveLazy replaces the Lazy values that an expression reads from the
// top of data by their values. It reports whether it replaced any.
func (e *expression) resolveLazy(data map[string]any) (bool, error) {
	replaced := false
	load := func(name string) error {
		l, ok := data[name].(*Lazy)
		if !ok {
			return nil
		}
		v, err := l.Value()
		if err != nil {
			return err
		}
		data[name] = v
		replaced = true
		return nil
	}
	if e.readsRoot {
		for name := range data {
			if err := load(name); err != nil {
				return replaced, err
			}
		}
		return replaced, nil
	}
	for _, name := range e.roots {
		if err := load(name); err != nil {
			return replaced, err
		}
	}
	return replaced, nil
}

// rootReads collects the names an expression reads from the top of the
// data it is evaluated on, and whether it reads that data as a whole (@ at
// the top). Parts evaluated on something else (the right of a
// subexpression, pipe or projection, a filter's condition, an &expression)
// are not the top.
func rootReads(n parsing.ASTNode, names *[]string, whole *bool) {
	switch n.NodeType {
	case parsing.ASTField:
		if key, ok := n.Value.(string); ok {
			*names = append(*names, key)
		}
		return
	case parsing.ASTCurrentNode, parsing.ASTIdentity, parsing.ASTRootNode:
		*whole = true
		return
	case parsing.ASTLiteral:
		return
	case parsing.ASTExpRef:
		*whole = *whole || readsDollar(n)
		return
	case parsing.ASTSubexpression, parsing.ASTIndexExpression, parsing.ASTPipe, parsing.ASTFlatten,
		parsing.ASTProjection, parsing.ASTFilterProjection, parsing.ASTValueProjection:
		for i, c := range n.Children {
			if i == 0 {
				rootReads(c, names, whole)
			} else if readsDollar(c) { // $ reads the top from anywhere
				*whole = true
			}
		}
		return
	}
	for _, c := range n.Children {
		rootReads(c, names, whole)
	}
}

// requiredReads collects the names an expression reads from the top of the
// data (as rootReads) except those of an "||": a missing name on its left
// gives the right side, the default ("{{ foo || 'x' }}"), and its right side
// is evaluated only when the left is empty, as Kyverno's JMESPath does
// ("{{ a || b }}" is a's value, b undefined or not: issue 40); a missing
// last alternative is found once the whole is null (nullPath). The quoted
// identifier of an empty name ("") names no variable.
func requiredReads(n parsing.ASTNode, names *[]string) {
	switch n.NodeType {
	case parsing.ASTField:
		if key, ok := n.Value.(string); ok && key != "" {
			*names = append(*names, key)
		}
		return
	case parsing.ASTCurrentNode, parsing.ASTIdentity, parsing.ASTRootNode, parsing.ASTLiteral, parsing.ASTExpRef:
		return
	case parsing.ASTOrExpression:
		return
	case parsing.ASTSubexpression, parsing.ASTIndexExpression, parsing.ASTPipe, parsing.ASTFlatten,
		parsing.ASTProjection, parsing.ASTFilterProjection, parsing.ASTValueProjection:
		if len(n.Children) > 0 {
			requiredReads(n.Children[0], names)
		}
		return
	}
	for _, c := range n.Children {
		requiredReads(c, names)
	}
}

// readsDollar reports whether n reads the top of the data through $.
func readsDollar(n parsing.ASTNode) bool {
	if n.NodeType == parsing.ASTRootNode {
		return true
	}
	for _, c := range n.Children {
		if readsDollar(c) {
			return true
		}
	}
	return false
}
