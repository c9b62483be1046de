package tester

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// A ValidatingAdmissionPolicy is evaluated through its bindings with their
// params, and reported as Kyverno reports it (R36): rule = the policy's
// name, property binding, Kubernetes' messages; a resource no binding
// selects gets no result.
func TestValidatingAdmissionPolicy(t *testing.T) {
	file := filepath.Join("testdata", "vap", TestFileName)
	l := runAndLoad(t, file, 3)
	want := map[string]engine.RuleResult{
		"small":  {Result: engine.Pass, Message: ""},
		"big":    {Result: engine.Fail, Message: "replicas must be at most 3"},
		"exempt": {Result: engine.Skip, Message: "match conditions aren't met"},
	}
	for _, r := range l.resources {
		got := l.evaluate(context.Background(), l.policies[0], r, "")
		w, ok := want[r.name]
		if !ok {
			if len(got) != 0 {
				t.Errorf("%s: no binding selects it, got %+v", r.name, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("%s: %d results, want 1", r.name, len(got))
		}
		g := got[0]
		if g.Result != w.Result || g.Message != w.Message || g.Rule != "max-replicas" || g.Source != engine.SourceValidatingAdmissionPolicy ||
			g.Properties[engine.PropertyBinding] != "max-replicas-prod" {
			t.Errorf("%s: got %+v, want result %s, message %q, rule max-replicas, binding max-replicas-prod", r.name, g, w.Result, w.Message)
		}
	}
}

// runAndLoad runs a test file, requires its want outcomes all to pass, and
// returns the file loaded, for evaluating its policies directly.
func runAndLoad(t *testing.T, file string, want int) *loaded {
	t.Helper()
	outcomes, err := RunFile(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	if len(outcomes) != want {
		t.Fatalf("%d outcomes, want %d", len(outcomes), want)
	}
	for _, o := range outcomes {
		if o.Status != Passed {
			t.Errorf("%s on %s: expected %s, got %s (%s)", o.Policy, o.Resource, o.Expected, o.Got, o.Reason)
		}
	}
	docs, err := ReadDocuments(file)
	if err != nil {
		t.Fatal(err)
	}
	test, err := testOf(file, docs[0])
	if err != nil {
		t.Fatal(err)
	}
	l, err := load(file, test)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
