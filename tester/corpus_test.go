package tester

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCorpus runs Kyverno's own CLI test suites (../shared/corpus) and
// holds the engine to at least 98% of the expectations of the tiers it
// supports (classic, classic-ctx).
func TestCorpus(t *testing.T) {
	corpus := filepath.Join("..", "..", "shared", "corpus")
	index := filepath.Join(corpus, "INDEX.tsv")
	if _, err := os.Stat(index); err != nil {
		t.Skipf("corpus not found at %s (clone tally beside the shared folder to run it): %v", corpus, err)
	}
	rep, err := Run(context.Background(), []string{corpus})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.ApplyIndex(index); err != nil {
		t.Fatal(err)
	}
	var supported Counts
	for _, tier := range []string{"classic", "classic-ctx"} {
		c := rep.Tiers[tier]
		if c == nil {
			t.Fatalf("tier %s missing from the index", tier)
		}
		t.Logf("tier %s: %s", tier, c)
		supported.Passed += c.Passed
		supported.Failed += c.Failed
		supported.Skipped += c.Skipped
	}
	total := supported.Passed + supported.Failed + supported.Skipped
	if total < 1000 {
		t.Fatalf("only %d expectations in the supported tiers: the corpus was not read", total)
	}
	rate := float64(supported.Passed) / float64(total)
	t.Logf("classic + classic-ctx: %d of %d pass (%.2f%%)", supported.Passed, total, 100*rate)
	if rate < 0.98 {
		for _, o := range rep.Outcomes {
			if o.Status == Failed {
				t.Logf("fail: %s %s/%s on %s: expected %s, got %s: %s", o.File, o.Policy, o.Rule, o.Resource, o.Expected, o.Got, o.Reason)
			}
		}
		t.Errorf("pass rate %.2f%% is below 98%%", 100*rate)
	}
}
