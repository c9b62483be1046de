package tester

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// An object of a subresource kind (autoscaling/v1 Scale) that the values'
// subresources map to deployments/scale is evaluated as the scale
// subresource of a Deployment, as Kyverno's CLI does: rules matching
// Deployment/scale and Scale apply to it, rules matching Deployment or
// another parent's scale do not.
func TestSubresourceObjectsMatchTheirParentsSubresource(t *testing.T) {
	file := filepath.Join("testdata", "subresource", TestFileName)
	l := runAndLoad(t, file, 3)
	want := map[string]map[string]engine.RuleResult{
		"busybox": {
			"scale-max-eight": {Result: engine.Fail, Message: "validation error: The replica count for this Deployment may not exceed 8. rule scale-max-eight failed at path /spec/replicas/"},
			"any-scale":       {Result: engine.Fail, Message: "validation error: A Scale may not exceed 8 replicas. rule any-scale failed at path /spec/replicas/"},
		},
		"small": {
			"scale-max-eight": {Result: engine.Pass, Message: "validation rule 'scale-max-eight' passed."},
			"any-scale":       {Result: engine.Pass, Message: "validation rule 'any-scale' passed."},
		},
	}
	for _, r := range l.resources {
		got := l.evaluate(context.Background(), l.policies[0], r, "")
		w := want[r.name]
		if len(got) != len(w) {
			t.Errorf("%s: got %+v, want results of %d rules", r.name, got, len(w))
		}
		for _, g := range got {
			if wr, ok := w[g.Rule]; !ok || g.Result != wr.Result || g.Message != wr.Message {
				t.Errorf("%s: rule %s: got %s %q, want %+v", r.name, g.Rule, g.Result, g.Message, wr)
			}
		}
	}
	l.test.Values = nil
	for _, r := range l.resources {
		for _, g := range l.evaluate(context.Background(), l.policies[0], r, "") {
			if g.Rule != "any-scale" {
				t.Errorf("%s without the values' subresources: rule %s applied", r.name, g.Rule)
			}
		}
	}
}
