package tester

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/corpus"
)

// TestCorpusBeyond runs Kyverno's CLI test folders beyond validate
// (../shared/corpus-beyond) and holds, per tier, the number of folders
// that Kyverno's CLI passes (KYVERNO.tsv) which tally passes too: a folder
// passes when every expectation of it was evaluated and passed (none
// failed, none unsupported). The floors are the level reached; raise them
// as tiers are done, never lower them. The folders Kyverno passes and
// tally does not are logged with their first reason.
func TestCorpusBeyond(t *testing.T) {
	dir := corpus.BeyondDir(t)
	index, err := LoadIndex(filepath.Join(dir, "INDEX.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	kyverno := readVerdicts(t, filepath.Join(dir, "KYVERNO.tsv"))
	rep, err := RunWith(context.Background(), []string{dir}, Options{Index: index})
	if err != nil {
		t.Fatal(err)
	}
	type folder struct {
		passed, other int
		reason        string
	}
	folders := map[string]*folder{}
	for _, o := range rep.Outcomes {
		rel, err := filepath.Rel(dir, filepath.Dir(o.File))
		if err != nil {
			rel = filepath.Dir(o.File)
		}
		f := folders[rel]
		if f == nil {
			f = &folder{}
			folders[rel] = f
		}
		switch o.Status {
		case Passed, Skipped:
			f.passed++
		default:
			f.other++
			if f.reason == "" {
				f.reason = o.Status.String() + ": " + o.Policy + "/" + o.Rule + " on " + o.Resource + ": " + o.Reason
			}
		}
	}
	// Reached on 2026-11-29 (issue 56): every folder Kyverno's CLI passes
	// (90; the ivpol and other verifyimages folders need ghcr.io, and
	// Kyverno fails them here too).
	floors := map[string]int{
		"mutate": 18, "mutate-existing": 2, "generate": 10, "vap": 5, "map": 7, "mpol": 12, "mocked-data": 9, "dpol": 5, "json": 10, "gpol": 11, "verifyimages": 1,
	}
	passes := map[string]int{}
	var missing []string
	for name, v := range kyverno {
		if !v.passed {
			continue
		}
		f := folders[name]
		if f != nil && f.passed > 0 && f.other == 0 {
			passes[v.tier]++
			continue
		}
		why := "no expectation evaluated"
		if f != nil && f.reason != "" {
			why = f.reason
		}
		missing = append(missing, v.tier+" "+name+": "+why)
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Logf("Kyverno passes, tally does not: %s", m)
	}
	for tier, floor := range floors {
		t.Logf("tier %s: %d folders pass that Kyverno passes", tier, passes[tier])
		if passes[tier] < floor {
			t.Errorf("tier %s: %d folders pass that Kyverno passes, where %d did", tier, passes[tier], floor)
		}
	}
}

type verdict struct {
	tier   string
	passed bool
}

// readVerdicts reads KYVERNO.tsv: folder, tier, Kyverno's exit code, summary.
func readVerdicts(t *testing.T, path string) map[string]verdict {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]verdict{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) < 3 || cols[0] == "folder" {
			continue
		}
		out[cols[0]] = verdict{tier: cols[1], passed: cols[2] == "0"}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("%s: only %d folders: not read", path, len(out))
	}
	return out
}
