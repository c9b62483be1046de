package cel

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// Shared returns a JSON-shaped value (as Normalize returns it) as a CEL
// value whose maps and lists wrap each member the first time it is read
// and keep it. The type adapter wraps a Go map or slice anew on every read,
// and with cost tracking every step of a field path is converted, so the
// policies of a request that all read object.spec.containers would wrap
// the same maps once per expression. The objects of a request are read by
// every expression of every policy: the engine shares them this way.
// Safe for concurrent use. Values other than maps and slices are returned
// as the adapter converts them.
func Shared(v any) ref.Val {
	switch x := v.(type) {
	case map[string]any:
		return &sharedMap{Mapper: types.DefaultTypeAdapter.NativeToValue(x).(traits.Mapper), m: x}
	case []any:
		return &sharedList{Lister: types.DefaultTypeAdapter.NativeToValue(x).(traits.Lister), l: x, elems: make([]ref.Val, len(x))}
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// sharedMap is a map(string, dyn): cel-go's own view of m for everything
// but reading a member.
type sharedMap struct {
	traits.Mapper
	m    map[string]any
	mu   sync.Mutex
	kids map[string]ref.Val
}

var (
	_ traits.Mapper = (*sharedMap)(nil)
	_ traits.Zeroer = (*sharedMap)(nil)
	_ traits.Lister = (*sharedList)(nil)
	_ traits.Zeroer = (*sharedList)(nil)
)

func (s *sharedMap) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return s.Mapper.Find(key)
	}
	raw, ok := s.m[string(k)]
	if !ok {
		return nil, false
	}
	switch raw.(type) {
	case map[string]any, []any:
	default:
		return types.DefaultTypeAdapter.NativeToValue(raw), true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.kids[string(k)]; ok {
		return v, true
	}
	v := Shared(raw)
	if s.kids == nil {
		s.kids = make(map[string]ref.Val, 4)
	}
	s.kids[string(k)] = v
	return v, true
}

func (s *sharedMap) Get(key ref.Val) ref.Val {
	if v, found := s.Find(key); found {
		return v
	}
	return s.Mapper.Get(key)
}

func (s *sharedMap) IsZeroValue() bool { return len(s.m) == 0 }
func (s *sharedMap) String() string    { return fmt.Sprint(s.Mapper) }

// sharedList is a list(dyn): cel-go's own view of l for everything but
// reading an element.
type sharedList struct {
	traits.Lister
	l     []any
	mu    sync.Mutex
	elems []ref.Val
}

func (s *sharedList) Get(index ref.Val) ref.Val {
	i, ok := index.(types.Int)
	if !ok || i < 0 || int(i) >= len(s.l) {
		return s.Lister.Get(index)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.elems[i]; v != nil {
		return v
	}
	v := Shared(s.l[i])
	s.elems[i] = v
	return v
}

func (s *sharedList) Iterator() traits.Iterator { return &sharedIterator{l: s} }

// Fold iterates the elements for two-variable comprehensions.
func (s *sharedList) Fold(f traits.Folder) {
	for i := range s.l {
		if !f.FoldEntry(types.Int(i), s.Get(types.Int(i))) {
			return
		}
	}
}

func (s *sharedList) IsZeroValue() bool { return len(s.l) == 0 }
func (s *sharedList) String() string    { return fmt.Sprint(s.Lister) }

// sharedIterator walks a sharedList's elements.
type sharedIterator struct {
	l *sharedList
	i int
}

func (it *sharedIterator) HasNext() ref.Val { return types.Bool(it.i < len(it.l.l)) }

func (it *sharedIterator) Next() ref.Val {
	if it.i >= len(it.l.l) {
		return nil
	}
	v := it.l.Get(types.Int(it.i))
	it.i++
	return v
}

func (it *sharedIterator) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion to %q", t.Name())
}
func (it *sharedIterator) ConvertToType(t ref.Type) ref.Val {
	return types.NewErr("disallowed conversion to %q", t.TypeName())
}
func (it *sharedIterator) Equal(other ref.Val) ref.Val { return types.MaybeNoSuchOverloadErr(other) }
func (it *sharedIterator) Type() ref.Type              { return types.IteratorType }
func (it *sharedIterator) Value() any                  { return nil }
