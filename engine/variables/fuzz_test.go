package variables

import (
	"testing"
	"time"
)

// FuzzSubstitute: any string, as a pattern value or a message, substitutes
// or fails with an error; it never panics or hangs.
func FuzzSubstitute(f *testing.F) {
	for _, seed := range []string{
		"{{ request.object.metadata.name }}", "a {{request.operation}} b", `\{{ x }}`, "{{", "}}", "{{}}",
		"{{ '{{ request.operation }}' }}", "{{ to_upper(request.object.metadata.name) }}", "{{ {a: `1`} }}",
		"{{ request.object.spec.containers[?name=='a'].image | [0] }}", "{{ divide(`1`, `0`) }}", "{{{{}}}}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = Substitute(s, doc)
			_, _ = SubstituteMode(map[string]any{s: []any{s}}, doc, Lenient)
			_ = References(s)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("substitution of %q did not finish", s)
		}
	})
}

// FuzzQuery: any expression evaluates or fails with an error.
func FuzzQuery(f *testing.F) {
	for _, seed := range []string{
		"request.object.metadata.name", "length(@)", "[", "a.b[?c == `1`]", "regex_match('(', 'x')",
		"items(request.object.metadata, 'k', 'v')", "add('1Gi', `1`)", "sum([])", "modulo(`1`, `0`)",
		"semver_compare('x', 'y')", "time_add('bad', '1h')", "lookup(`[1]`, `-1`)",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		_, _ = Query(expr, doc)
	})
}
