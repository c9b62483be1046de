package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

func result(policy, rule string, r wgv1alpha2.Result, message string) wgv1alpha2.PolicyReportResult {
	return wgv1alpha2.PolicyReportResult{Source: "kyverno", Policy: policy, Rule: rule, Result: r, Severity: "high",
		Category: "Pod Security", Message: message}
}

// fakeCluster serves two PolicyReports in two namespaces and one
// ClusterPolicyReport.
func fakeCluster(t *testing.T) dynamic.Interface {
	t.Helper()
	scheme := runtime.NewScheme() // unstructured objects only
	pod := report.Subject{APIVersion: "v1", Kind: "Pod", Namespace: "prod", Name: "web", UID: "uid-web"}
	polr, _ := report.Final(pod, []wgv1alpha2.PolicyReportResult{
		result("disallow-privileged", "privileged", wgv1alpha2.ResultFail, "validation error: privileged, \"quoted\""),
		result("require-labels", "team", wgv1alpha2.ResultPass, "validation rule 'team' passed."),
	})
	polr.Results[0].Timestamp.Seconds = 1700000000
	dev := report.Subject{APIVersion: "v1", Kind: "Pod", Namespace: "dev", Name: "job", UID: "uid-job"}
	polr2, _ := report.Final(dev, []wgv1alpha2.PolicyReportResult{result("require-labels", "team", wgv1alpha2.ResultWarn, "missing")})
	ns := report.Subject{APIVersion: "v1", Kind: "Namespace", Name: "prod", UID: "uid-ns"}
	_, cpolr := report.Final(ns, []wgv1alpha2.PolicyReportResult{result("require-ns-labels", "owner", wgv1alpha2.ResultFail, "owner missing")})
	var objs []runtime.Object
	for _, o := range []any{polr, polr2, cpolr} {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		apiresources.PolicyReport: "PolicyReportList", apiresources.ClusterPolicyReport: "ClusterPolicyReportList",
	}, objs...)
}

func useFakeCluster(t *testing.T) {
	client := fakeCluster(t)
	old := newDynamicClient
	newDynamicClient = func(string) (dynamic.Interface, error) { return client, nil }
	t.Cleanup(func() { newDynamicClient = old })
}

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestReportExportCSVFromACluster(t *testing.T) {
	useFakeCluster(t)
	out, errOut, code := runCLI(t, "report", "export", "--format", "csv", "-A")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	records, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("not CSV: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(records[0], exportColumns) {
		t.Errorf("header %v", records[0])
	}
	want := [][]string{
		{"", "Namespace", "prod", "uid-ns", "require-ns-labels", "owner", "fail", "high", "Pod Security", "owner missing", "", "kyverno"},
		{"dev", "Pod", "job", "uid-job", "require-labels", "team", "warn", "high", "Pod Security", "missing", "", "kyverno"},
		{"prod", "Pod", "web", "uid-web", "disallow-privileged", "privileged", "fail", "high", "Pod Security", "validation error: privileged, \"quoted\"", "2023-11-14T22:13:20Z", "kyverno"},
		{"prod", "Pod", "web", "uid-web", "require-labels", "team", "pass", "high", "Pod Security", "validation rule 'team' passed.", "", "kyverno"},
	}
	if !reflect.DeepEqual(records[1:], want) {
		t.Errorf("rows:\n%v\nwant\n%v", records[1:], want)
	}
}

func TestReportExportFilters(t *testing.T) {
	tests := map[string]struct {
		args []string
		want []string // policy/rule@namespace
	}{
		"one namespace, no cluster reports": {[]string{"-n", "prod"}, []string{"disallow-privileged/privileged@prod", "require-labels/team@prod"}},
		"only failures":                     {[]string{"--result", "fail"}, []string{"require-ns-labels/owner@", "disallow-privileged/privileged@prod"}},
		"failures and warnings":             {[]string{"--result", "fail,warn"}, []string{"require-ns-labels/owner@", "require-labels/team@dev", "disallow-privileged/privileged@prod"}},
		"one policy":                        {[]string{"--policy", "require-labels"}, []string{"require-labels/team@dev", "require-labels/team@prod"}},
		"a policy and a result":             {[]string{"--policy", "require-labels", "--result", "pass"}, []string{"require-labels/team@prod"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			useFakeCluster(t)
			out, errOut, code := runCLI(t, append([]string{"report", "export", "--format", "json"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var rows []exportRow
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				t.Fatalf("not a JSON array: %v\n%s", err, out)
			}
			got := []string{}
			for _, r := range rows {
				got = append(got, r.Policy+"/"+r.Rule+"@"+r.Namespace)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReportExportBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: [unclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args []string
		want string
	}{
		"an unknown format":            {[]string{"--format", "xml"}, `unknown --format "xml" (want csv, json or jsonl)`},
		"an unknown result":            {[]string{"--result", "fail,bad"}, `--result: "bad" is not one of pass, fail, warn, error, skip`},
		"both -n and -A":               {[]string{"-n", "x", "-A"}, "exclude each other"},
		"a missing file":               {[]string{"--from", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		"a malformed file":             {[]string{"--from", bad}, "bad.yaml"},
		"an unreachable kubeconfig":    {[]string{"--kubeconfig", filepath.Join(dir, "nope")}, "nope"},
		"both --from and --kubeconfig": {[]string{"--from", dir, "--kubeconfig", "k"}, "exclude each other"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, code := runCLI(t, append([]string{"report", "export"}, tc.args...)...)
			if code != exitCouldNotRun || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

func TestReportExportFromScanOutput(t *testing.T) {
	dir := t.TempDir()
	for _, format := range []string{"yaml", "json"} {
		out, errOut, code := runCLI(t, "scan", "../../config/samples", "-o", format)
		if code != exitOK {
			t.Fatalf("scan -o %s: exit %d: %s", format, code, errOut)
		}
		if err := os.WriteFile(filepath.Join(dir, "reports."+format), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var perFormat [][]exportRow
	for _, format := range []string{"yaml", "json"} {
		out, errOut, code := runCLI(t, "report", "export", "--from", filepath.Join(dir, "reports."+format), "--format", "jsonl")
		if code != exitOK {
			t.Fatalf("export --from %s: exit %d: %s", format, code, errOut)
		}
		var rows []exportRow
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var r exportRow
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("not JSON lines: %v", err)
			}
			rows = append(rows, r)
		}
		perFormat = append(perFormat, rows)
	}
	rows := perFormat[0]
	// The two scans ran apart: their results' times may differ by a second.
	untimed := func(rows []exportRow) []exportRow {
		out := slices.Clone(rows)
		for i := range out {
			out[i].Timestamp = ""
		}
		return out
	}
	if !reflect.DeepEqual(untimed(perFormat[0]), untimed(perFormat[1])) {
		t.Errorf("YAML and JSON scan output export differently:\n%v\n%v", perFormat[0], perFormat[1])
	}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Result] = true
		if r.Namespace == "" || r.Kind == "" || r.Name == "" || r.Policy == "" || r.Rule == "" || r.Message == "" || r.Timestamp == "" || r.Source != "kyverno" {
			t.Errorf("incomplete row %+v", r)
		}
	}
	for _, want := range []string{"pass", "fail", "warn", "skip"} {
		if !seen[want] {
			t.Errorf("no %s row exported from the samples", want)
		}
	}
	// A folder holds both files: every row twice.
	out, _, code := runCLI(t, "report", "export", "--from", dir, "--format", "jsonl")
	if n := strings.Count(out, "\n"); code != exitOK || n != 2*len(rows) {
		t.Errorf("export of the folder: exit %d, %d rows, want %d", code, n, 2*len(rows))
	}
}

func TestReportRowsWithoutScope(t *testing.T) {
	// Reports of other tools may name their subjects per result.
	r := &wgv1alpha2.PolicyReport{Results: []wgv1alpha2.PolicyReportResult{result("p", "r", wgv1alpha2.ResultFail, "m")}}
	r.Namespace = "ns"
	r.Results[0].Resources = append(r.Results[0].Resources, objectRef("Pod", "a", "u1"), objectRef("Pod", "b", "u2"))
	rows := rowsOf(r)
	if len(rows) != 2 || rows[0].Name != "a" || rows[1].UID != "u2" || rows[1].Namespace != "ns" {
		t.Errorf("rows %+v", rows)
	}
}

func objectRef(kind, name, uid string) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "v1", Kind: kind, Name: name, UID: types.UID(uid)}
}
