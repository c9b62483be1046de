package variables

import (
	"testing"
	"time"
)

// FuzzSubstitute: any string, as a pattern value, a key or a message,
// substitutes or fails with an error; it never panics or hangs.
func FuzzSubstitute(f *testing.F) {
	for _, seed := range []string{
		"{{ request.object.metadata.name }}", "a {{request.operation}} b", `\{{ x }}`, "{{", "}}", "{{}}",
		"{{ '{{ request.operation }}' }}", "{{ to_upper(request.object.metadata.name) }}", "{{ {a: `1`} }}",
		"{{ request.object.spec.containers[?name=='a'].image | [0] }}", "{{ divide(`1`, `0`) }}", "{{{{}}}}",
		"{{- config.data.template }}", "x {{- config.data.template }} {{ @ }}", "$(./../x)", "$(<./../../a/b) {{ y }}",
		"{{ request.object.metadata.labels.{{ config.data.key }} }}", "\x00{{- config.data.template }}\x00",
		"{{ add('1Gi', '{{ request.object.spec.replicas }}') }}", "{{ random('[a-z]{3}') }}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = Substitute(s, doc)
			_, _ = Substitute(map[string]any{"a": map[string]any{s: []any{s}}, "b": s}, doc)
			_, _ = SubstituteMode(map[string]any{s: []any{s}}, doc, Lenient)
			_, _ = SubstituteString(s, doc)
			_, _ = ResolveReferences(map[string]any{"a": s, "b": map[string]any{"c": s}})
			_ = References(s)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("substitution of %q did not finish", s)
		}
	})
}

// FuzzQuery: any expression evaluates or fails with an error.
func FuzzQuery(f *testing.F) {
	for _, seed := range []string{
		"request.object.metadata.name", "length(@)", "[", "a.b[?c == `1`]", "regex_match('(', 'x')",
		"items(request.object.metadata, 'k', 'v')", "add('1Gi', `1`)", "sum([])", "modulo(`1`, `0`)",
		"semver_compare('x', 'y')", "time_add('bad', '1h')", "lookup(`[1]`, `-1`)", "multiply('1Ei', `1e300`)",
		"divide('1', '3')", "modulo('7.5', '2')", "round(`1e308`, `2`)", "truncate('abc', `1e300`)",
		"semver_compare('1.2.3', '>=1.x || !2.*')", "time_truncate('2023-01-12T17:37:00Z', '-1h')",
		"x509_decode('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----')", "random('a{0,1000}')",
		"image_normalize('a:b@c')", "is_external_url('http://[::1]')", "parse_yaml('a: &x [*x]')",
		"request.object.spec.containers[].ports[].containerPort | max(@)", "`1` / `0`", "-`1`",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = Query(expr, doc)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("query %q did not finish", expr)
		}
	})
}
