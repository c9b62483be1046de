package tester

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A test file's tier is that of the index row its folder ends with, the
// most specific one when several do.
func TestIndexTierOf(t *testing.T) {
	file := filepath.Join(t.TempDir(), "INDEX.tsv")
	rows := "suite\tfolder\ttier\texpectations\n" +
		"cli\tsamples/a\tclassic\t1\n" +
		"cli\tsamples/b\tvpol\t2\n" +
		"lib\tcli/samples/b\tclassic-ctx\t1\n" +
		"short\trow\n" +
		"cli\tsamples/c\tclassic\t1\n"
	if err := os.WriteFile(file, []byte(rows), 0o600); err != nil {
		t.Fatal(err)
	}
	index, err := LoadIndex(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(index.Tiers(), ","); got != "classic,vpol,classic-ctx" {
		t.Errorf("tiers %s, want classic,vpol,classic-ctx (in the order of their first row)", got)
	}
	tests := map[string]struct{ file, want string }{
		"a folder named as in the index":      {file: "cli/samples/a/kyverno-test.yaml", want: "classic"},
		"a folder under the corpus root":      {file: "/corpus/cli/samples/a/kyverno-test.yaml", want: "classic"},
		"the longest row wins":                {file: "/corpus/lib/cli/samples/b/kyverno-test.yaml", want: "classic-ctx"},
		"a folder that only ends like a row":  {file: "/corpus/xcli/samples/a/kyverno-test.yaml", want: "unindexed"},
		"a folder no row holds":               {file: "/corpus/cli/samples/z/kyverno-test.yaml", want: "unindexed"},
		"a row's subfolder is not in the row": {file: "/corpus/cli/samples/a/deeper/kyverno-test.yaml", want: "unindexed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := index.TierOf(tc.file); got != tc.want {
				t.Errorf("TierOf(%s) = %q, want %q", tc.file, got, tc.want)
			}
		})
	}
	var none *Index
	if none.TierOf("a/kyverno-test.yaml") != "" || none.Tiers() != nil {
		t.Error("without an index a file has a tier")
	}
	if _, err := LoadIndex(filepath.Join(t.TempDir(), "missing.tsv")); err == nil {
		t.Error("a missing index loads")
	}
}

// A file rolls up to its worst outcome, or Errored when it could not run
// as written.
func TestFileResultStatus(t *testing.T) {
	pass, skip, fail := Outcome{Status: Passed}, Outcome{Status: Skipped}, Outcome{Status: Failed}
	tests := map[string]struct {
		result FileResult
		want   Status
	}{
		"no outcome is a pass":                {want: Passed},
		"passes and a skip are a skip":        {result: FileResult{Outcomes: []Outcome{pass, skip, pass}}, want: Skipped},
		"a failure among passes is a failure": {result: FileResult{Outcomes: []Outcome{pass, fail, skip}}, want: Failed},
		"a refused policy is an error":        {result: FileResult{Outcomes: []Outcome{pass, skip}, InvalidPolicies: []string{"p"}}, want: Errored},
		"an unreadable input is an error":     {result: FileResult{Outcomes: []Outcome{fail}, Unreadable: []string{"r"}}, want: Errored},
		"an unreadable test file is an error": {result: FileResult{Outcomes: []Outcome{fail}, Err: errors.New("bad")}, want: Errored},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.result.Status(); got != tc.want {
				t.Errorf("status %s, want %s", got, tc.want)
			}
		})
	}
}

// reporterFunc adapts a function to a Reporter.
type reporterFunc func(Results) error

func (f reporterFunc) Report(res Results) error { return f(res) }

// RunFiles runs a file only when the reporter asks for its result, and
// says when the reporter stopped before the end.
func TestRunFilesFollowsTheReporter(t *testing.T) {
	files, err := Discover([]string{"testdata"})
	if err != nil || len(files) < 2 {
		t.Fatalf("testdata holds %d test files (%v), want several", len(files), err)
	}
	stopAfterOne := func(fail error) Reporter {
		return reporterFunc(func(res Results) error {
			for range res.Files {
				break
			}
			return fail
		})
	}
	tests := map[string]struct {
		ctx      func() context.Context
		reporter Reporter
		files    int
		err      string
	}{
		"a reporter that ranges to the end runs every file": {
			reporter: Discard, files: len(files),
		},
		"a reporter that fails stops the run with its error": {
			reporter: stopAfterOne(errors.New("disk full")), files: 1, err: "report test results: disk full",
		},
		"a reporter that stops without an error is a bug said as such": {
			reporter: stopAfterOne(nil), files: 1, err: "the reporter stopped after 1 of",
		},
		"a cancelled run runs nothing and says why": {
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			reporter: Discard, files: 0, err: context.Canceled.Error(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			sum, err := RunFiles(ctx, files, Options{}, tc.reporter)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			if sum.Files != tc.files {
				t.Errorf("%d files ran, want %d", sum.Files, tc.files)
			}
		})
	}
}

// Issue 56: an expectation whose input the policy does not evaluate (an
// HTTP or Envoy payload under a JSON policy, a JSON payload under a
// Kubernetes one) or that names nothing to evaluate is never counted as
// passed: the file's status is unsupported or failed (exit 1), not
// "0 passed, 0 failed" and exit 0.
func TestNothingUnevaluatedPasses(t *testing.T) {
	dir := t.TempDir()
	policy := "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: p}\nspec:\n  evaluation: {mode: JSON}\n  validations: [{expression: 'true'}]\n" +
		"---\napiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: k}\nspec:\n  matchConstraints: {resourceRules: [{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}\n  validations: [{expression: 'true'}]\n"
	for name, test := range map[string]string{
		"http":    "httpPayloads: [payload.json]\nresults: [{policy: p, result: pass, kind: ''}]",
		"envoy":   "envoyPayloads: [payload.json]\nresults: [{policy: p, result: pass, kind: ''}]",
		"nothing": "results: [{policy: p, result: pass, kind: Pod}]",
		"json":    "jsonPayloads: [payload.json]\nresults: [{policy: k, result: pass, kind: ''}]",
	} {
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string]string{
			"policy.yaml":       policy,
			"payload.json":      `{"a": 1}`,
			"pod.yaml":          "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n",
			"kyverno-test.yaml": "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: " + name + "}\npolicies: [policy.yaml]\n" + test + "\n",
		}
		for f, data := range files {
			if err := os.WriteFile(filepath.Join(sub, f), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(name, func(t *testing.T) {
			sum, err := RunFiles(context.Background(), []string{filepath.Join(sub, "kyverno-test.yaml")}, Options{}, Discard)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Counts.Passed != 0 || sum.Counts.Unsupported+sum.Counts.Failed == 0 || sum.Status() < Unsupported {
				t.Errorf("counts %+v, status %v: an expectation not evaluated passed, or the run passes", sum.Counts, sum.Status())
			}
		})
	}
}
