package tester

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/wildcard"
)

// Options choose what a run runs.
type Options struct {
	// FileName is the name of the test files RunWith looks for (default
	// kyverno-test.yaml).
	FileName string
	// Selector keeps the expectations it selects (Kyverno's --test-case-selector).
	Selector Selector
	// Index, when set, puts each test file in a tier of the corpus index
	// (FileResult.Tier), and the reports count outcomes per tier.
	Index *Index
	// Images verifies the images of verifyImages rules and
	// ImageValidatingPolicies (the CLI's registry access); nil skips those
	// rules, and their expectations are not evaluated.
	Images engine.ImageVerifier
	// Registry reads image data from the registries (getImageData of
	// ImageValidatingPolicies); nil: only a context file's images.
	Registry cel.ImageData
}

// Selector selects expectations by policy, rule and resource name; an
// empty or "*" field selects every value.
type Selector struct{ Policy, Rule, Resource string }

// ParseSelector reads Kyverno's selector syntax:
// "policy=NAME, rule=NAME, resource=NAME" (any of the three).
func ParseSelector(s string) (Selector, error) {
	var sel Selector
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return sel, fmt.Errorf("test case selector %q: %q is not key=value", s, part)
		}
		switch strings.TrimSpace(k) {
		case "policy":
			sel.Policy = strings.TrimSpace(v)
		case "rule":
			sel.Rule = strings.TrimSpace(v)
		case "resource":
			sel.Resource = strings.TrimSpace(v)
		default:
			return sel, fmt.Errorf("test case selector %q: unknown key %q (want policy, rule or resource)", s, k)
		}
	}
	return sel, nil
}

// selects matches the selector's fields as Kyverno's does: wildcards (*
// and ?) allowed, a namespace/name resource or policy also named by its
// name alone.
func (s Selector) selects(o Outcome) bool {
	match := func(want, got string) bool {
		if want == "" || wildcard.Match(want, got) {
			return true
		}
		_, plain, ok := strings.Cut(got, "/")
		return ok && wildcard.Match(want, plain)
	}
	return match(s.Policy, o.Policy) && match(s.Rule, o.Rule) && match(s.Resource, o.Resource)
}

// FileResult is what running one test file gave: the unit a run streams to
// its reporter.
type FileResult struct {
	File string
	// Tier is the file's tier in Options.Index ("unindexed" when no row
	// holds it); empty without an index.
	Tier string
	// Outcomes are the expectations the selector kept, in the file's order.
	// When the file could not be read (Err), one failed outcome says why.
	Outcomes []Outcome
	// InvalidPolicies are the policies refused as a cluster would refuse
	// them, one line each naming the file, the policy and the field paths;
	// their expectations are skipped.
	InvalidPolicies []string
	// Unreadable are the files a test names that could not be read, or are
	// not what they should be; that test's expectations fail.
	Unreadable []string
	// Err means the test file itself could not be read.
	Err error
}

// Status rolls the file up: its outcomes merged, Errored when the file, or
// what a test names, could not be read or a policy was refused.
func (f FileResult) Status() Status {
	s := merged(f.Outcomes)
	if f.Err != nil || len(f.Unreadable) > 0 || len(f.InvalidPolicies) > 0 {
		s = s.Merge(Errored)
	}
	return s
}

// merged is the most severe status of outcomes (Passed for none).
func merged(outs []Outcome) Status {
	s := Passed
	for _, o := range outs {
		s = s.Merge(o.Status)
	}
	return s
}

// Run runs every test file under paths. A file that cannot be read counts as
// one failed expectation, and the others still run. Finding no test file is
// not an error: the report says so with Files == 0.
func Run(ctx context.Context, paths []string) (*Report, error) {
	return RunWith(ctx, paths, Options{})
}

// RunWith is Run with options. It prints nothing: the caller reads the
// Report (RunFiles streams to a reporter).
func RunWith(ctx context.Context, paths []string, opts Options) (*Report, error) {
	files, err := DiscoverNamed(paths, opts.FileName)
	if err != nil {
		return nil, err
	}
	return RunFiles(ctx, files, opts, Discard)
}

// RunFiles runs the test files in the order given, streaming each file's
// result to rep as soon as the file has run (see Reporter), and returns the
// summary of the run: the same Report a reporter builds with Add. A file
// that cannot be read is reported as such and the others still run. The
// error is ctx's when the run was cut short, or rep's when it could not
// write.
func RunFiles(ctx context.Context, files []string, opts Options, rep Reporter) (*Report, error) {
	sum := NewReport(opts.Index.Tiers())
	var runErr error
	next := 0
	results := func(yield func(FileResult) bool) {
		for next < len(files) {
			if err := ctx.Err(); err != nil {
				runErr = err
				return
			}
			fr := runOne(ctx, files[next], opts)
			next++
			sum.Add(fr)
			if !yield(fr) {
				return
			}
		}
	}
	if err := rep.Report(Results{Tiers: opts.Index.Tiers(), Files: results}); err != nil {
		return sum, fmt.Errorf("report test results: %w", err)
	}
	switch {
	case runErr != nil:
		return sum, runErr
	case next < len(files):
		return sum, fmt.Errorf("report test results: the reporter stopped after %d of %d test files", next, len(files))
	}
	return sum, nil
}

// runOne runs one test file and keeps what the selector selects.
func runOne(ctx context.Context, file string, opts Options) FileResult {
	run, err := runFile(ctx, file, runEnv{images: opts.Images, registry: opts.Registry})
	fr := FileResult{File: file, Tier: opts.Index.TierOf(file), InvalidPolicies: run.invalid, Unreadable: run.unreadable, Err: err}
	for _, o := range run.outcomes {
		if opts.Selector.selects(o) {
			fr.Outcomes = append(fr.Outcomes, o)
		}
	}
	if err != nil {
		// Whatever the selector says: a file that could not be read is
		// one failed expectation.
		fr.Outcomes = append(fr.Outcomes, Outcome{File: file, Status: Failed, Reason: err.Error()})
	}
	return fr
}

// Index is the corpus index (a TSV with the columns suite, folder, tier,
// ...): which tier each test folder belongs to.
type Index struct {
	tiers  []string          // in the order of their first row
	tierOf map[string]string // suite/folder: tier (the last row wins)
	keys   []string          // tierOf's keys, in row order
}

// LoadIndex reads a corpus index.
func LoadIndex(file string) (*Index, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	x := &Index{tierOf: map[string]string{}}
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		cols := strings.Split(sc.Text(), "\t")
		if line == 0 || len(cols) < 3 {
			continue
		}
		key := filepath.ToSlash(filepath.Join(cols[0], cols[1]))
		if _, ok := x.tierOf[key]; !ok {
			x.keys = append(x.keys, key)
		}
		x.tierOf[key] = cols[2]
		if !slices.Contains(x.tiers, cols[2]) {
			x.tiers = append(x.tiers, cols[2])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return x, nil
}

// Tiers are the tier names in the order of the index (none for a nil Index).
func (x *Index) Tiers() []string {
	if x == nil {
		return nil
	}
	return x.tiers
}

// TierOf is the tier of a test file: that of the row whose suite/folder its
// directory ends with (the longest such), "unindexed" when there is none,
// and "" for a nil Index.
func (x *Index) TierOf(file string) string {
	if x == nil {
		return ""
	}
	dir := filepath.ToSlash(filepath.Dir(file))
	tier, best := "unindexed", -1
	for _, key := range x.keys {
		if (dir == key || strings.HasSuffix(dir, "/"+key)) && len(key) > best {
			tier, best = x.tierOf[key], len(key)
		}
	}
	return tier
}
