package tester

import (
	"context"
	"path/filepath"
	"testing"
)

// TestCorpus runs Kyverno's own CLI test suites (../shared/corpus) and
// holds every tier (classic rules, with context entries, validate.cel
// rules, ValidatingPolicies) to the expectations passed on 2026-11-24: no
// fewer passes, no failure. Raise the counts when the corpus grows.
func TestCorpus(t *testing.T) {
	corpus := corpusDir(t)
	index, err := LoadIndex(filepath.Join(corpus, "INDEX.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := RunWith(context.Background(), []string{corpus}, Options{Index: index})
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	for tier, minPassed := range map[string]int{"classic": 1227, "classic-ctx": 28, "classic-cel": 1057, "vpol": 908} {
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
		if c.Passed < minPassed || c.Failed > 0 {
			failed = true
			t.Errorf("tier %s: %d passed and %d failed, where %d passed and none failed", tier, c.Passed, c.Failed, minPassed)
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
