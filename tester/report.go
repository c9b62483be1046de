package tester

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	sigsyaml "sigs.k8s.io/yaml"
)

// Reporter writes the results of a run as they come. It is the one place an
// output format plugs in: RunFiles runs, a Reporter writes.
//
// The contract:
//   - Report is called once per run. Ranging over res.Files runs the test
//     files, one per iteration, in the order given to RunFiles: each
//     FileResult is yielded as soon as its file has run, so a reporter that
//     writes as it ranges streams.
//   - A reporter ranges over res.Files to the end, unless it fails: it then
//     returns its error and the files left do not run. Stopping early
//     without an error is a bug RunFiles reports.
//   - A reporter needing totals builds them with NewReport(res.Tiers) and
//     Add, as RunFiles builds the summary it returns: the two agree.
//   - A reporter does not decide the exit code, and writes nothing but its
//     format: the caller reads RunFiles' summary (Report.Status) for both.
type Reporter interface {
	Report(res Results) error
}

// Results is a run as a reporter receives it.
type Results struct {
	// Tiers are the tier names of Options.Index, in its order (nil without
	// an index): a report lists every tier, even one with no outcome.
	Tiers []string
	// Files yields each test file's result once it has run. It can be
	// ranged over once.
	Files iter.Seq[FileResult]
}

// Discard is a Reporter that writes nothing: the run is read from the
// summary RunFiles returns.
var Discard Reporter = discard{}

type discard struct{}

func (discard) Report(res Results) error {
	for range res.Files {
	}
	return nil
}

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

// Report is the summary of a run, as Add builds it from the files' results;
// the JSON and YAML reporters print it whole.
type Report struct {
	Outcomes []Outcome `json:"outcomes"`
	// Files is the number of test files run (none is not an error: the
	// caller decides, as kyverno test --require-tests does).
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

	status Status
}

// NewReport is an empty summary that will list the given tiers (those of
// Results.Tiers) first, in their order.
func NewReport(tiers []string) *Report {
	r := &Report{}
	for _, t := range tiers {
		r.tier(t)
	}
	return r
}

// Add counts one file's result in. A line of Errors or InvalidPolicies
// several files share is kept once.
func (r *Report) Add(f FileResult) {
	r.Files++
	r.Outcomes = append(r.Outcomes, f.Outcomes...)
	for _, inv := range f.InvalidPolicies {
		if !slices.Contains(r.InvalidPolicies, inv) {
			r.InvalidPolicies = append(r.InvalidPolicies, inv)
		}
	}
	for _, e := range f.Unreadable {
		if !slices.Contains(r.Errors, e) {
			r.Errors = append(r.Errors, e)
		}
	}
	if f.Err != nil {
		r.Errors = append(r.Errors, f.Err.Error())
	}
	for _, o := range f.Outcomes {
		r.Counts.add(o.Status)
		if f.Tier != "" {
			r.tier(f.Tier).add(o.Status)
		}
	}
	r.status = r.status.Merge(f.Status())
}

// tier returns the counts of a tier, adding the tier after the others.
func (r *Report) tier(name string) *Counts {
	if r.Tiers == nil {
		r.Tiers = map[string]*Counts{}
	}
	c := r.Tiers[name]
	if c == nil {
		c = &Counts{}
		r.Tiers[name] = c
		r.TierOrder = append(r.TierOrder, name)
	}
	return c
}

// Status is the run rolled up: the Merge of every file's status. Errored
// means a test could not run; Unsupported and above fail the run.
func (r *Report) Status() Status { return r.status }

// TableOptions choose what the table reporter prints.
type TableOptions struct {
	// FailOnly prints only the expectations that failed (or are unsupported).
	FailOnly bool
	// Detailed prints reasons whole, with the expected and actual results.
	Detailed bool
	// Roots are the paths the run was given: test files are named relative
	// to the one they were found under.
	Roots []string
}

// NewTable is the reporter kyverno test's output is modelled on: one table
// per test file (its expectations numbered, each with its result and
// reason), written as the file has run, then the tier and total lines.
func NewTable(w io.Writer, opts TableOptions) Reporter { return table{w: w, opts: opts} }

type table struct {
	w    io.Writer
	opts TableOptions
}

func (t table) Report(res Results) error {
	w := &errWriter{w: t.w}
	sum := NewReport(res.Tiers)
	// A file given twice runs twice, its results one after the other (the
	// files are sorted): both runs share one table, numbered on.
	var pending []Outcome
	for fr := range res.Files {
		sum.Add(fr)
		if len(pending) > 0 && pending[0].File != fr.File {
			t.writeFile(w, pending)
			pending = nil
		}
		pending = append(pending, fr.Outcomes...)
		if w.err != nil {
			return w.err
		}
	}
	if len(pending) > 0 {
		t.writeFile(w, pending)
	}
	for _, name := range sum.TierOrder {
		fmt.Fprintf(w, "tier %s: %s\n", name, sum.Tiers[name])
	}
	fmt.Fprintln(w, sum.Counts)
	return w.err
}

// writeFile prints the table of one test file's outcomes.
func (t table) writeFile(w *errWriter, outs []Outcome) {
	if t.opts.FailOnly && merged(outs) < Unsupported {
		return
	}
	var c Counts
	for _, o := range outs {
		c.add(o.Status)
	}
	fmt.Fprintf(w, "Test %s (%s): %s\n", relativeTo(outs[0].File, t.opts.Roots), outs[0].Test, c)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if t.opts.Detailed {
		fmt.Fprintln(tw, "  ID\tPOLICY\tRULE\tRESOURCE\tRESULT\tEXPECTED\tGOT\tREASON")
	} else {
		fmt.Fprintln(tw, "  ID\tPOLICY\tRULE\tRESOURCE\tRESULT\tREASON")
	}
	for i, o := range outs {
		if t.opts.FailOnly && o.Status < Unsupported {
			continue
		}
		reason := "Ok"
		switch {
		case o.Status != Passed && o.Reason != "":
			reason = o.Reason
		case o.Status == Failed:
			reason = fmt.Sprintf("Want %s, got %s", o.Expected, o.Got)
		case o.Reason != "" && t.opts.Detailed:
			reason = o.Reason
		}
		if t.opts.Detailed {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, o.Policy, o.Rule, o.Resource, o.Status.word(), o.Expected, o.Got, reason)
		} else {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", i+1, o.Policy, o.Rule, o.Resource, o.Status.word(), oneLine(reason))
		}
	}
	_ = tw.Flush() // its error is w's, which Report returns
	fmt.Fprintln(w)
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

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// errWriter keeps the first write error, so that a reporter writes on and
// checks once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// NewJSON is a reporter that prints the whole Report as JSON once the run
// is over.
func NewJSON(w io.Writer) Reporter { return document{w: w} }

// NewYAML is NewJSON in YAML.
func NewYAML(w io.Writer) Reporter { return document{w: w, yaml: true} }

type document struct {
	w    io.Writer
	yaml bool
}

func (d document) Report(res Results) error {
	sum := NewReport(res.Tiers)
	for fr := range res.Files {
		sum.Add(fr)
	}
	if d.yaml {
		data, err := sigsyaml.Marshal(sum)
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = d.w.Write(data)
		return err
	}
	enc := json.NewEncoder(d.w)
	enc.SetIndent("", "  ")
	return enc.Encode(sum)
}

// NewJUnit is a reporter that prints JUnit XML once the run is over: one
// suite per test file, sorted by name; failed expectations are failures,
// skipped and unsupported ones skipped.
func NewJUnit(w io.Writer) Reporter { return junit{w: w} }

type junit struct{ w io.Writer }

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

func (j junit) Report(res Results) error {
	var out junitSuites
	byFile := map[string]*junitSuite{}
	var order []string
	for fr := range res.Files {
		for _, o := range fr.Outcomes {
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
				out.Failures++
			case Skipped, Unsupported:
				c.Skipped = &junitMessage{Message: o.Reason}
				s.Skipped++
				out.Skipped++
			}
			s.Tests++
			out.Tests++
			s.Cases = append(s.Cases, c)
		}
	}
	sort.Strings(order)
	for _, f := range order {
		out.Suites = append(out.Suites, *byFile[f])
	}
	w := &errWriter{w: j.w} // the writes' errors are w.err
	io.WriteString(w, xml.Header)
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	io.WriteString(w, "\n")
	return w.err
}
