package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func TestEveryCaseLoads(t *testing.T) {
	cases, err := Load(Cases, "cases")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < len(Rules) {
		t.Errorf("%d cases for %d rules", len(cases), len(Rules))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if c.Description == "" {
			t.Errorf("%s: no description", c.Name)
		}
		seen[c.Rules[0]] = true
	}
	// Every rule has a case named after it, or a CONTRIBUTING.md entry saying why not.
	readme, err := os.ReadFile(filepath.Join("..", "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Rules {
		if seen[r.ID] {
			continue
		}
		row := regexp.MustCompile(`(?m)^\| ` + r.ID + ` \|.*\|\s*$`).Find(readme)
		if row == nil || !strings.Contains(string(row), "difference") && !strings.Contains(string(row), "integration test") {
			t.Errorf("%s has no case named after it and no CONTRIBUTING.md entry explaining why", r.ID)
		}
	}
}

// CONTRIBUTING.md's rule table names the cases that exist, and every case.
func TestReadmeTableNamesTheCases(t *testing.T) {
	cases, err := Load(Cases, "cases")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if !strings.Contains(string(readme), "`"+c.Name+"`") {
			t.Errorf("CONTRIBUTING.md's rule table does not name case %s", c.Name)
		}
	}
}

func TestBadCasesAreRejectedWithTheirName(t *testing.T) {
	tests := map[string]struct{ file, want string }{
		"no rules":            {"rules: []\nsteps: [{then: {}}]", "at least one R-ID"},
		"bad rule id":         {"rules: [X1]\nsteps: [{then: {}}]", `"X1" is not an R-ID`},
		"name not rule":       {"rules: [R02]\nsteps: [{then: {}}]", "must start with its first rule"},
		"two actions":         {"rules: [R01]\nsteps: [{when: [{scan: true, restart: scanner}], then: {}}]", "exactly one action"},
		"unknown field":       {"rules: [R01]\nstep: []", "unknown field"},
		"no steps":            {"rules: [R01]", "at least one step"},
		"absent+results":      {"rules: [R01]\nsteps: [{then: {reports: [{for: {kind: Pod, name: p}, absent: true, results: [{policy: p}]}]}}]", "exclude each other"},
		"unusable non-policy": {"rules: [R01]\ngiven: {unusablePolicies: [{policy: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}}]}\nsteps: [{then: {}}]", "has no Ready condition"},
		"bad intermediate":    {"rules: [R01]\nsteps: [{then: {intermediate: [{for: {kind: Pod, name: p}, kind: Foo}]}}]", "AdmissionReport or BackgroundScanReport"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{"cases/R01-x.yaml": {Data: []byte(tc.file)}, "cases/R01-good.yaml": {Data: []byte("rules: [R01]\ndescription: d\nsteps: [{then: {}}]")}}
			cases, err := Load(fsys, "cases")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "R01-x.yaml") {
				t.Fatalf("error %v, want one naming R01-x.yaml and %q", err, tc.want)
			}
			if len(cases) != 1 || cases[0].Name != "R01-good" {
				t.Fatalf("the good case must still load, got %v", cases)
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	out := Verdict([]CaseResult{
		{Name: "R01-a", Rules: []string{"R01", "R19"}},
		{Name: "R19-b", Rules: []string{"R19"}, Err: os.ErrClosed},
		{Name: "R29-c", Rules: []string{"R29"}, Skipped: true},
	})
	for _, want := range []string{"R01   pass", "R19   FAIL", "R29   skip", "R02   skip     (no case run)", fmt.Sprintf("1 of %d rules failed", len(Rules))} {
		if !strings.Contains(out, want) {
			t.Errorf("verdict lacks %q:\n%s", want, out)
		}
	}
}

// Every rule of Rules is written out in docs/reporting-rules.md, and
// every rule written there is in Rules: an Rnn anywhere in the repository
// points at a rule the repository holds (issue 57).
func TestRulesAreWrittenInTheRepository(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "reporting-rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^- \*\*(R\d\d)\*\* `).FindAllSubmatch(doc, -1) {
		written[string(m[1])] = true
	}
	known := map[string]bool{}
	for _, r := range Rules {
		known[r.ID] = true
		if !written[r.ID] {
			t.Errorf("%s (%s) is not written in docs/reporting-rules.md", r.ID, r.Title)
		}
	}
	for id := range written {
		if !known[id] {
			t.Errorf("docs/reporting-rules.md writes %s, which Rules does not list", id)
		}
	}
	if len(written) != 48 {
		t.Errorf("docs/reporting-rules.md writes %d rules, want R01-R48", len(written))
	}
}
