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
)

// Counts tallies outcomes.
type Counts struct {
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

func (c *Counts) add(s Status) {
	switch s {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	case Skipped:
		c.Skipped++
	}
}

func (c Counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}

// Report is the result of a run.
type Report struct {
	Outcomes []Outcome `json:"outcomes"`
	// Errors are test files that could not be read.
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

// Run runs every test file under paths. A file that cannot be read counts as
// one failed expectation, and the others still run.
func Run(ctx context.Context, paths []string) (*Report, error) {
	files, err := Discover(paths)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no %s found under %s", TestFileName, strings.Join(paths, ", "))
	}
	rep := &Report{}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		outs, invalid, err := runFile(ctx, f)
		rep.Outcomes = append(rep.Outcomes, outs...)
		for _, inv := range invalid {
			if !contains(rep.InvalidPolicies, inv) {
				rep.InvalidPolicies = append(rep.InvalidPolicies, inv)
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

// WriteTable prints failures (all outcomes when verbose), then the tier and total lines.
func (r *Report) WriteTable(w io.Writer, verbose bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tTEST\tPOLICY\tRULE\tRESOURCE\tEXPECTED\tGOT\tREASON")
	for _, o := range r.Outcomes {
		if o.Status == Passed && !verbose {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Status, o.File, o.Policy, o.Rule, o.Resource, o.Expected, o.Got, oneLine(o.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	r.writeTotals(w)
	return nil
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
		case Skipped:
			c.Skipped = &junitMessage{Message: o.Reason}
			s.Skipped++
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	sort.Strings(order)
	out := junitSuites{Tests: len(r.Outcomes), Failures: r.Counts.Failed, Skipped: r.Counts.Skipped}
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
