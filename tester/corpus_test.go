package tester

import (
	"context"
	"path/filepath"
	"testing"
)

// TestCorpus runs Kyverno's own CLI test suites (../shared/corpus) and
// holds the engine to at least 98% of the expectations of every tier:
// classic rules, with context entries, validate.cel rules and
// ValidatingPolicies.
func TestCorpus(t *testing.T) {
	corpus := corpusDir(t)
	rep, err := Run(context.Background(), []string{corpus})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.ApplyIndex(filepath.Join(corpus, "INDEX.tsv")); err != nil {
		t.Fatal(err)
	}
	failed := false
	for _, tier := range []string{"classic", "classic-ctx", "classic-cel", "vpol"} {
		c := rep.Tiers[tier]
		if c == nil {
			t.Fatalf("tier %s missing from the index", tier)
		}
		total := c.Passed + c.Failed + c.Skipped
		if total < 20 {
			t.Fatalf("tier %s: only %d expectations: the corpus was not read", tier, total)
		}
		rate := float64(c.Passed) / float64(total)
		t.Logf("tier %s: %s (%.2f%%)", tier, c, 100*rate)
		if rate < 0.98 {
			failed = true
			t.Errorf("tier %s: pass rate %.2f%% is below 98%%", tier, 100*rate)
		}
	}
	if failed {
		for _, o := range rep.Outcomes {
			if o.Status == Failed {
				t.Logf("fail: %s %s/%s on %s: expected %s, got %s: %s", o.File, o.Policy, o.Rule, o.Resource, o.Expected, o.Got, o.Reason)
			}
		}
	}
}
