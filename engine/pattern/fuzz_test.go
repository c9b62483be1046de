package pattern

import (
	"github.com/tally-dev/tally/engine/wildcard"

	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzValidate feeds arbitrary JSON resources and patterns to Validate. It
// checks that nothing panics, that a result is well formed, and that the
// fast evaluation and the explaining one agree (Validate relies on it).
func FuzzValidate(f *testing.F) {
	seeds := [][2]string{
		{`{"spec":{"containers":[{"name":"a","securityContext":{"runAsUser":0}}]}}`,
			`{"spec":{"=(securityContext)":{"=(runAsUser)":">0"},"containers":[{"=(securityContext)":{"=(runAsUser)":">0"}}]}}`},
		{`{"spec":{"containers":[{"name":"istio-init"},{"name":"app","image":"x:latest"}]}}`,
			`{"spec":{"containers":[{"(name)":"!istio-init","image":"!*:latest"}]}}`},
		{`{"spec":{"volumes":[{"hostPath":{"path":"/var/run/docker.sock"}}]}}`,
			`{"metadata":{"labels":{"allow-docker":"true"}},"(spec)":{"(volumes)":[{"(hostPath)":{"path":"/var/run/docker.sock"}}]}}`},
		{`{"spec":{"containers":[{"image":"corp.reg.com/a"}],"imagePullSecrets":[{"name":"s"}]}}`,
			`{"spec":{"containers":[{"<(image)":"corp.reg.com/*"}],"imagePullSecrets":[{"name":"my-secret"}]}}`},
		{`{"metadata":{"annotations":{"fluxcd.io/x":"1"}}}`,
			`{"metadata":{"=(annotations)":{"X(fluxcd.io/*)":"*?"}}}`},
		{`{"spec":{"args":["a","b"],"m":[[1,2],[3]]}}`,
			`{"spec":{"^(args)":["b"],"m":[[1],[3]]}}`},
		{`{"data":{"a":"1536Mi","b":"90m","c":"-9","d":"1.10.0"}}`,
			`{"data":{"a":"1Gi-2Gi","b":">1h","c":"-10--8","d":">1.4.1 & !2.0.0 | null"}}`},
		{`[1,"a",null,true,{"a":[]}]`, `["*"]`},
		{`null`, `null`},
		{`{"a":{}}`, `{"a":[],"+(b)":1,"X()":2,"^(a)":{}}`},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, resourceJSON, patternJSON []byte) {
		withDeadline(t, func() error { return fuzzValidate(resourceJSON, patternJSON) })
	})
}

// withDeadline runs f and fails the test with its error, or if it runs for
// more than a few seconds: no input may make evaluation hang, and the fuzzer
// has no per-input limit of its own.
func withDeadline(t *testing.T, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("evaluation did not finish within 5s")
	}
}

func fuzzValidate(resourceJSON, patternJSON []byte) error {
	for _, useNumber := range []bool{false, true} {
		res, ok := decodeJSON(resourceJSON, useNumber)
		if !ok {
			return nil
		}
		pat, ok := decodeJSON(patternJSON, useNumber)
		if !ok {
			return nil
		}
		_ = Check(pat)
		got := Validate(res, pat)
		if err := checkResult(got); err != nil {
			return err
		}
		var fast evaluator
		if s := fast.eval(res, pat, scopeNone).status; s != got.Status {
			return fmt.Errorf("fast evaluation says %v, explained evaluation says %v", s, got.Status)
		}
		if anyRes := ValidateAny(res, []any{pat}); anyRes.Status != got.Status {
			return fmt.Errorf("ValidateAny of one pattern = %v, Validate = %v", anyRes.Status, got.Status)
		}
	}
	return nil
}

func decodeJSON(b []byte, useNumber bool) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	if useNumber {
		d.UseNumber()
	}
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func checkResult(r Result) error {
	switch r.Status {
	case Pass:
		if r.Path != "" || r.Message != "" {
			return fmt.Errorf("pass with path %q and message %q", r.Path, r.Message)
		}
	case Fail, Skip:
		if !strings.HasPrefix(r.Path, "/") || !strings.HasSuffix(r.Path, "/") {
			return fmt.Errorf("%v with malformed path %q", r.Status, r.Path)
		}
		if r.Message == "" {
			return fmt.Errorf("%v without message", r.Status)
		}
	default:
		return fmt.Errorf("unknown status %d", r.Status)
	}
	return nil
}

// FuzzMatchValue feeds arbitrary values and string patterns to MatchValue,
// and checks the wildcard matcher against a regular expression.
func FuzzMatchValue(f *testing.F) {
	seeds := [][2]string{
		{"nginx:latest", "!*:latest"}, {"1536Mi", "1Gi-2Gi"}, {"98Mi", "100Mi!-1024Mi"},
		{"-9", "-10--8"}, {"2.7", "2.5-3.5"}, {"90m", ">1h"}, {"1.10.0", ">1.4.1"},
		{"Localhost", "RuntimeDefault | Localhost"}, {"6.1", "!5.10.84-1 & !5.15.5-2"},
		{"abc", "a?c"}, {"", "?*"}, {"1e3", "1000"}, {"0x10", ">1"}, {"1h30m", "<=2h"},
		{"1.0.0-rc.1", "<1.0.0"}, {"é", "?"}, {"aaaaaaaaaaaaaaaaaaaaaaab", "*a*a*a*a*a*c"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, value, pattern string) {
		withDeadline(t, func() error { return fuzzMatchValue(value, pattern) })
	})
}

func fuzzMatchValue(value, pattern string) error {
	values := []any{value, nil, true, false, map[string]any{}, []any{value}, json.Number("12")}
	if n, ok := parseNumber(value); ok {
		values = append(values, n.f, n.i, json.Number(value))
	}
	for _, v := range values {
		MatchValue(v, pattern)
		if !MatchValue(v, "*") && v != nil {
			return fmt.Errorf("%#v does not match *", v)
		}
	}
	MatchValue(value, nil)
	MatchValue(value, 1.5)
	if utf8.ValidString(value) && utf8.ValidString(pattern) {
		want := wildcardRegexp(pattern).MatchString(value)
		if got := wildcard.Match(pattern, value); got != want {
			return fmt.Errorf("wildcard.Match(%q, %q) = %v, regexp says %v", pattern, value, got, want)
		}
	}
	return nil
}

// wildcardRegexp is the reference meaning of a wildcard pattern.
func wildcardRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^`)
	for _, r := range p {
		switch r {
		case '*':
			b.WriteString(`(?s:.*)`)
		case '?':
			b.WriteString(`(?s:.)`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}
