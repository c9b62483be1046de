package tester

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/tally-dev/tally/engine/wildcard"
)

// Counts tallies outcomes.
type Counts struct {
	Passed      int `json:"passed"`
	Failed      int `json:"failed"`
	Skipped     int `json:"skipped"`
	Unsupported int `json:"unsupported,omitempty"`
}

func (c *Counts) add(s Status) {
	switch s {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	case Skipped:
		c.Skipped++
	case Unsupported:
		c.Unsupported++
	}
}

func (c Counts) String() string {
	s := fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
	if c.Unsupported > 0 {
		s += fmt.Sprintf(", %d unsupported", c.Unsupported)
	}
	return s
}

// Report is the result of a run.
type Report struct {
	Outcomes []Outcome `json:"outcomes"`
	// Files is the number of test files found (none is not an error:
	// the caller decides, as kyverno test --require-tests does).
	Files int `json:"files"`
	// Errors are test files that could not be read, and files a test
	// names that could not be read (their expectations fail too).
	Errors []string `json:"errors,omitempty"`
	// InvalidPolicies are the policies refused as a cluster would refuse
	// them (schema, Kyverno's semantic rules), one line each naming the
	// file, the policy and the field paths; their expectations are skipped.
	InvalidPolicies []string `json:"invalidPolicies,omitempty"`
	Counts          Counts   `json:"counts"`
	// Tiers, when an index was given: counts per tier name, and the order of the names.
	Tiers     map[string]*Counts `json:"tiers,omitempty"`
	TierOrder []string           `json:"-"`
}

// Options choose what a run runs.
type Options struct {
	// FileName is the name of the test files (default kyverno-test.yaml).
	FileName string
	// Selector keeps the expectations it selects (Kyverno's --test-case-selector).
	Selector Selector
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

// Run runs every test file under paths. A file that cannot be read counts as
// one failed expectation, and the others still run. Finding no test file is
// not an error: the report says so with Files == 0.
func Run(ctx context.Context, paths []string) (*Report, error) {
	return RunWith(ctx, paths, Options{})
}

// RunWith is Run with options.
func RunWith(ctx context.Context, paths []string, opts Options) (*Report, error) {
	files, err := DiscoverNamed(paths, opts.FileName)
	if err != nil {
		return nil, err
	}
	rep := &Report{Files: len(files)}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		run, err := runFile(ctx, f, nil)
		for _, o := range run.outcomes {
			if opts.Selector.selects(o) {
				rep.Outcomes = append(rep.Outcomes, o)
			}
		}
		for _, inv := range run.invalid {
			if !contains(rep.InvalidPolicies, inv) {
				rep.InvalidPolicies = append(rep.InvalidPolicies, inv)
			}
		}
		for _, e := range run.unreadable {
			if !contains(rep.Errors, e) {
				rep.Errors = append(rep.Errors, e)
			}
		}
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
			rep.Outcomes = append(rep.Outcomes, Outcome{File: f, Status: Failed, Reason: err.Error()})
		}
	}
	for _, o := range rep.Outcomes {
		rep.Counts.add(o.Status)
	}
	return rep, nil
}

// ApplyIndex counts outcomes per tier, from the corpus index (a TSV with the
// columns suite, folder, tier, ...). A test file belongs to the row whose
// suite/folder its path ends with; files in no row count under "unindexed".
func (r *Report) ApplyIndex(indexFile string) error {
	f, err := os.Open(indexFile)
	if err != nil {
		return err
	}
	defer f.Close()
	tierOf := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		cols := strings.Split(sc.Text(), "\t")
		if line == 0 || len(cols) < 3 {
			continue
		}
		key := filepath.ToSlash(filepath.Join(cols[0], cols[1]))
		tierOf[key] = cols[2]
		if !contains(r.TierOrder, cols[2]) {
			r.TierOrder = append(r.TierOrder, cols[2])
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", indexFile, err)
	}
	r.Tiers = map[string]*Counts{}
	for _, t := range r.TierOrder {
		r.Tiers[t] = &Counts{}
	}
	for _, o := range r.Outcomes {
		tier := "unindexed"
		dir := filepath.ToSlash(filepath.Dir(o.File))
		for key, t := range tierOf {
			if dir == key || strings.HasSuffix(dir, "/"+key) {
				tier = t
				break
			}
		}
		if r.Tiers[tier] == nil {
			r.Tiers[tier] = &Counts{}
			r.TierOrder = append(r.TierOrder, tier)
		}
		r.Tiers[tier].add(o.Status)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TableOptions choose what WriteTable prints.
type TableOptions struct {
	// FailOnly prints only the expectations that failed (or are unsupported).
	FailOnly bool
	// Detailed prints reasons whole, with the expected and actual results.
	Detailed bool
	// Roots are the paths the run was given: test files are named relative
	// to the one they were found under.
	Roots []string
}

// WriteTable prints one table per test file, as kyverno test does (its
// expectations numbered, each with its result and reason), then the tier
// and total lines.
func (r *Report) WriteTable(w io.Writer, opts TableOptions) error {
	var files []string
	byFile := map[string][]Outcome{}
	for _, o := range r.Outcomes {
		if _, ok := byFile[o.File]; !ok {
			files = append(files, o.File)
		}
		byFile[o.File] = append(byFile[o.File], o)
	}
	for _, f := range files {
		outs := byFile[f]
		var c Counts
		for _, o := range outs {
			c.add(o.Status)
		}
		if opts.FailOnly && c.Failed == 0 && c.Unsupported == 0 {
			continue
		}
		fmt.Fprintf(w, "Test %s (%s): %s\n", relativeTo(f, opts.Roots), outs[0].Test, c)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		header := "  ID\tPOLICY\tRULE\tRESOURCE\tRESULT\tREASON"
		if opts.Detailed {
			header = "  ID\tPOLICY\tRULE\tRESOURCE\tRESULT\tEXPECTED\tGOT\tREASON"
		}
		fmt.Fprintln(tw, header)
		for i, o := range outs {
			if opts.FailOnly && o.Status != Failed && o.Status != Unsupported {
				continue
			}
			reason := "Ok"
			switch {
			case o.Status != Passed && o.Reason != "":
				reason = o.Reason
			case o.Status == Failed:
				reason = fmt.Sprintf("Want %s, got %s", o.Expected, o.Got)
			case o.Reason != "" && opts.Detailed:
				reason = o.Reason
			}
			if !opts.Detailed {
				reason = oneLine(reason)
			}
			if opts.Detailed {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, o.Policy, o.Rule, o.Resource, statusWord(o.Status), o.Expected, o.Got, reason)
			} else {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", i+1, o.Policy, o.Rule, o.Resource, statusWord(o.Status), reason)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	r.writeTotals(w)
	return nil
}

// statusWord is a status as kyverno test prints it.
func statusWord(s Status) string {
	switch s {
	case Passed:
		return "Pass"
	case Failed:
		return "Fail"
	case Skipped:
		return "Skip"
	}
	return "Unsupported"
}

// relativeTo names a test file relative to the root it was found under.
func relativeTo(file string, roots []string) string {
	best := file
	for _, root := range roots {
		dir := root
		if info, err := os.Stat(root); err == nil && !info.IsDir() {
			dir = filepath.Dir(root)
		}
		if rel, err := filepath.Rel(dir, file); err == nil && !strings.HasPrefix(rel, "..") && len(rel) < len(best) {
			best = rel
		}
	}
	return filepath.ToSlash(best)
}

func (r *Report) writeTotals(w io.Writer) {
	for _, t := range r.TierOrder {
		fmt.Fprintf(w, "tier %s: %s\n", t, r.Tiers[t])
	}
	fmt.Fprintln(w, r.Counts)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// WriteJSON prints the whole report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
}

// WriteJUnit prints the report as JUnit XML, one suite per test file.
func (r *Report) WriteJUnit(w io.Writer) error {
	byFile := map[string]*junitSuite{}
	var order []string
	for _, o := range r.Outcomes {
		s := byFile[o.File]
		if s == nil {
			s = &junitSuite{Name: o.File}
			byFile[o.File] = s
			order = append(order, o.File)
		}
		c := junitCase{Name: fmt.Sprintf("%s/%s/%s", o.Policy, o.Rule, o.Resource), Classname: o.Test}
		switch o.Status {
		case Failed:
			c.Failure = &junitMessage{Message: fmt.Sprintf("expected %s, got %s: %s", o.Expected, o.Got, o.Reason)}
			s.Failures++
		case Skipped, Unsupported:
			c.Skipped = &junitMessage{Message: o.Reason}
			s.Skipped++
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	sort.Strings(order)
	out := junitSuites{Tests: len(r.Outcomes), Failures: r.Counts.Failed, Skipped: r.Counts.Skipped + r.Counts.Unsupported}
	for _, f := range order {
		out.Suites = append(out.Suites, *byFile[f])
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
