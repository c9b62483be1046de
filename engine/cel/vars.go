package cel

import (
	"fmt"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// varMap is `variables` in one evaluation: each variable is evaluated the
// first time an expression reads it, and kept for the others, as the API
// server's composition does (k8s.io/apiserver/pkg/cel/lazy). Its names,
// order and CEL type are the program's, built once; an evaluation only
// allocates the slice of values.
type varMap struct {
	prog *Program
	a    *activation
	vals []ref.Val
}

var (
	_ ref.Val       = (*varMap)(nil)
	_ traits.Mapper = (*varMap)(nil)
)

// resolve evaluates variable i once.
func (m *varMap) resolve(i int) ref.Val {
	if v := m.vals[i]; v != nil {
		return v
	}
	e := m.prog.variables[i]
	v, err := m.a.eval(e)
	if err != nil {
		v = types.NewErr("composited variable %q fails to evaluate: %v", e.name, err)
	}
	m.vals[i] = v
	return v
}

// Find implements traits.Mapper: a variable by (escaped) name.
func (m *varMap) Find(key ref.Val) (ref.Val, bool) {
	s, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), true
	}
	if i, ok := m.prog.escIndex[string(s)]; ok {
		return m.resolve(i), true
	}
	name, ok := apiservercel.Unescape(string(s))
	if !ok {
		return nil, false
	}
	i, ok := m.prog.varIndex[name]
	if !ok {
		return nil, false
	}
	return m.resolve(i), true
}

func (m *varMap) Get(key ref.Val) ref.Val {
	if v, found := m.Find(key); found {
		return v
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

func (m *varMap) Contains(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if v != nil && types.IsUnknownOrError(v) {
		return v
	}
	return types.Bool(found)
}

func (m *varMap) Size() ref.Val { return types.Int(len(m.prog.variables)) }

func (m *varMap) Iterator() traits.Iterator { return &varIterator{m: m} }

func (m *varMap) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion from %q to %q", m.prog.varType.TypeName(), t.Name())
}

func (m *varMap) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case m.prog.varType:
		return m
	case types.TypeType:
		return m.prog.varType
	}
	return types.NewErr("disallowed conversion from %q to %q", m.prog.varType.TypeName(), t.TypeName())
}

func (m *varMap) Equal(other ref.Val) ref.Val {
	o, ok := other.(*varMap)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(m == o)
}

func (m *varMap) Type() ref.Type { return m.prog.varType }
func (m *varMap) Value() any     { return types.NoSuchOverloadErr() }

// varIterator iterates the variables' names, in their order.
type varIterator struct {
	m *varMap
	i int
}

func (it *varIterator) HasNext() ref.Val { return types.Bool(it.i < len(it.m.prog.variables)) }

func (it *varIterator) Next() ref.Val {
	if it.i >= len(it.m.prog.variables) {
		return nil
	}
	name := it.m.prog.variables[it.i].name
	it.i++
	return types.String(name)
}

func (it *varIterator) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion to %q", t.Name())
}
func (it *varIterator) ConvertToType(t ref.Type) ref.Val {
	return types.NewErr("disallowed conversion to %q", t.TypeName())
}
func (it *varIterator) Equal(other ref.Val) ref.Val { return types.MaybeNoSuchOverloadErr(other) }
func (it *varIterator) Type() ref.Type              { return types.IteratorType }
func (it *varIterator) Value() any                  { return nil }
