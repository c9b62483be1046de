package variables

import (
	"errors"
	"slices"
	"testing"
)

// An expression loads the Lazy values it reads from the top of the data,
// and only those: names read on the right of a path, a pipe or a
// projection are fields of what came before, not context entries.
func TestLazyValuesLoadWhenTheTopReadsThem(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // names loaded
	}{
		{"a", []string{"a"}},
		{"a.b", []string{"a"}},
		{"b.a", []string{"b"}},
		{"length(a) > `1` && c", []string{"a"}},
		{"x[?name == 'a'].b", nil},
		{"x[?name == $.a].b", []string{"a", "b"}}, // $ reads the whole top
		{"x | a", nil},
		{"a[*].b", []string{"a"}},
		{"{k: a, l: b}", []string{"a", "b"}},
		{"@", []string{"a", "b"}},
		{"'a'", nil},
	} {
		var loaded []string
		lazy := func(name string) *Lazy {
			return NewLazy(name, func() (any, error) { loaded = append(loaded, name); return map[string]any{"b": "v"}, nil })
		}
		data := map[string]any{"a": lazy("a"), "b": lazy("b"), "x": []any{map[string]any{"name": "a"}}}
		if _, err := Query(tc.expr, data); err != nil {
			t.Errorf("%s: %v", tc.expr, err)
		}
		slices.Sort(loaded)
		if !slices.Equal(loaded, tc.want) {
			t.Errorf("%s: loaded %v, want %v", tc.expr, loaded, tc.want)
		}
	}
}

// A failed load is the variable's error in every mode; a Lazy loads once and
// one that reads itself is an error, not a loop.
func TestLazyErrors(t *testing.T) {
	calls := 0
	data := map[string]any{"gone": NewLazy("gone", func() (any, error) { calls++; return nil, errors.New("configmap ns/gone not found") })}
	for _, mode := range []Mode{Strict, Lenient} {
		_, err := SubstituteStringMode("{{ gone.data.x }}", data, mode)
		if err == nil || err.Error() != "failed to resolve gone.data.x at path : configmap ns/gone not found" {
			t.Errorf("mode %v: %v", mode, err)
		}
	}
	if calls != 1 {
		t.Errorf("loaded %d times, want once", calls)
	}
	var self *Lazy
	self = NewLazy("self", func() (any, error) { return self.Value() })
	if _, err := self.Value(); err == nil || err.Error() != "context entry self reads itself" {
		t.Errorf("self-reading entry: %v", err)
	}
}
