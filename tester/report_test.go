package tester

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// Add rolls the files' results into the summary: outcomes in order, a
// line several files share once, tiers in the index's order (every one of
// them) then as they come.
func TestReportAdd(t *testing.T) {
	sum := NewReport([]string{"classic", "vpol"})
	sum.Add(FileResult{File: "a", Tier: "classic", Outcomes: []Outcome{{File: "a", Status: Passed}, {File: "a", Status: Skipped}},
		InvalidPolicies: []string{"p.yaml: refused"}})
	sum.Add(FileResult{File: "b", Tier: "unindexed", Outcomes: []Outcome{{File: "b", Status: Failed}},
		InvalidPolicies: []string{"p.yaml: refused"}, Unreadable: []string{"b: r.yaml missing"}})
	sum.Add(FileResult{File: "c", Tier: "unindexed", Outcomes: []Outcome{{File: "c", Status: Failed, Reason: "bad"}}, Err: errors.New("c: bad")})
	sum.Add(FileResult{File: "d", Tier: "never-counted"})

	if sum.Files != 4 || len(sum.Outcomes) != 4 {
		t.Errorf("%d files, %d outcomes; want 4 and 4", sum.Files, len(sum.Outcomes))
	}
	if want := []string{"p.yaml: refused"}; !slices.Equal(sum.InvalidPolicies, want) {
		t.Errorf("invalid policies %q, want %q", sum.InvalidPolicies, want)
	}
	if want := []string{"b: r.yaml missing", "c: bad"}; !slices.Equal(sum.Errors, want) {
		t.Errorf("errors %q, want %q", sum.Errors, want)
	}
	if want := (Counts{Passed: 1, Failed: 2, Skipped: 1}); sum.Counts != want {
		t.Errorf("counts %v, want %v", sum.Counts, want)
	}
	if want := []string{"classic", "vpol", "unindexed"}; !slices.Equal(sum.TierOrder, want) {
		t.Errorf("tiers %q, want %q (a tier without outcome is listed only from the index)", sum.TierOrder, want)
	}
	if *sum.Tiers["vpol"] != (Counts{}) || *sum.Tiers["unindexed"] != (Counts{Failed: 2}) {
		t.Errorf("tier counts vpol %v, unindexed %v", sum.Tiers["vpol"], sum.Tiers["unindexed"])
	}
	if sum.Status() != Errored {
		t.Errorf("status %s, want error", sum.Status())
	}
}

// The table reporter writes a file's table once the file has run, before
// the files after it run; a file given twice shares one table.
func TestTableStreams(t *testing.T) {
	outcome := func(file string, s Status) Outcome {
		return Outcome{File: file, Test: "t", Policy: "p", Rule: "r", Resource: "x", Expected: "pass", Status: s}
	}
	results := []FileResult{
		{File: "dir/a/kyverno-test.yaml", Outcomes: []Outcome{outcome("dir/a/kyverno-test.yaml", Passed)}},
		{File: "dir/b/kyverno-test.yaml", Outcomes: []Outcome{outcome("dir/b/kyverno-test.yaml", Passed)}},
		{File: "dir/b/kyverno-test.yaml", Outcomes: []Outcome{outcome("dir/b/kyverno-test.yaml", Failed)}},
		{File: "dir/c/kyverno-test.yaml", Outcomes: []Outcome{outcome("dir/c/kyverno-test.yaml", Skipped)}},
	}
	var out bytes.Buffer
	var seen []string // what was written when each result after the first was handed over
	files := func(yield func(FileResult) bool) {
		for i, fr := range results {
			if i > 0 {
				seen = append(seen, out.String())
			}
			if !yield(fr) {
				return
			}
		}
	}
	if err := NewTable(&out, TableOptions{Roots: []string{"dir"}}).Report(Results{Files: files}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(seen[1], "Test a/kyverno-test.yaml (t): 1 passed") {
		t.Errorf("a's table was not written before b's second run was handed over:\n%s", seen[1])
	}
	if strings.Contains(seen[2], "Test b/") {
		t.Errorf("b's table was written before b's second run was:\n%s", seen[2])
	}
	got := out.String()
	for _, want := range []string{
		"Test b/kyverno-test.yaml (t): 1 passed, 1 failed, 0 skipped\n",
		"  2   p       r     x         Fail",
		"Test c/kyverno-test.yaml (t): 0 passed, 0 failed, 1 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, "\n2 passed, 1 failed, 1 skipped\n") {
		t.Errorf("output does not end with the totals:\n%s", got)
	}
}

// Every reporter tells the run RunFiles summarises: JSON and YAML print the
// summary whole, JUnit and the table count as it does.
func TestReportersAgreeWithTheSummary(t *testing.T) {
	files, err := Discover([]string{"testdata"})
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "testdata/none/kyverno-test.yaml") // cannot be read
	run := func(t *testing.T, rep func(*bytes.Buffer) Reporter) (*Report, []byte) {
		t.Helper()
		var out bytes.Buffer
		sum, err := RunFiles(context.Background(), files, Options{}, rep(&out))
		if err != nil {
			t.Fatal(err)
		}
		if sum.Counts.Passed == 0 || sum.Counts.Failed != 1 || sum.Status() != Errored {
			t.Fatalf("counts %v, status %s: want passes, one failure (the missing file) and an error", sum.Counts, sum.Status())
		}
		return sum, out.Bytes()
	}
	t.Run("json", func(t *testing.T) {
		sum, out := run(t, func(b *bytes.Buffer) Reporter { return NewJSON(b) })
		var got Report
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		got.status = sum.status
		if !reflect.DeepEqual(&got, sum) {
			t.Errorf("JSON report differs from the summary:\n%s", out)
		}
	})
	t.Run("yaml", func(t *testing.T) {
		sum, out := run(t, func(b *bytes.Buffer) Reporter { return NewYAML(b) })
		var got Report
		if err := sigsyaml.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		got.status = sum.status
		if !reflect.DeepEqual(&got, sum) {
			t.Errorf("YAML report differs from the summary:\n%s", out)
		}
	})
	t.Run("junit", func(t *testing.T) {
		sum, out := run(t, func(b *bytes.Buffer) Reporter { return NewJUnit(b) })
		var got junitSuites
		if err := xml.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if got.Tests != len(sum.Outcomes) || got.Failures != sum.Counts.Failed || got.Skipped != sum.Counts.Skipped+sum.Counts.Unsupported || len(got.Suites) != len(files) {
			t.Errorf("junit counts %d tests, %d failures, %d skipped, %d suites; summary %v over %d files", got.Tests, got.Failures, got.Skipped, len(got.Suites), sum.Counts, len(files))
		}
	})
	t.Run("table", func(t *testing.T) {
		sum, out := run(t, func(b *bytes.Buffer) Reporter { return NewTable(b, TableOptions{}) })
		if !strings.HasSuffix(string(out), "\n"+sum.Counts.String()+"\n") {
			t.Errorf("table does not end with the summary's counts %q:\n%s", sum.Counts, out)
		}
	})
}

// A reporter that cannot write says so.
func TestReportersReturnWriteErrors(t *testing.T) {
	results := Results{Files: slices.Values([]FileResult{{File: "a", Outcomes: []Outcome{{File: "a", Status: Passed}}}})}
	for name, rep := range map[string]func(w *failingWriter) Reporter{
		"table": func(w *failingWriter) Reporter { return NewTable(w, TableOptions{}) },
		"json":  func(w *failingWriter) Reporter { return NewJSON(w) },
		"yaml":  func(w *failingWriter) Reporter { return NewYAML(w) },
		"junit": func(w *failingWriter) Reporter { return NewJUnit(w) },
	} {
		t.Run(name, func(t *testing.T) {
			if err := rep(&failingWriter{}).Report(results); err == nil || !strings.Contains(err.Error(), "disk full") {
				t.Errorf("error %v, want the write's", err)
			}
		})
	}
}

type failingWriter struct{}

func (*failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
