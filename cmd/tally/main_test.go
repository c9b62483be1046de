package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

func TestScanShippedSamples(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"scan", "../../config/samples", "-o", "json"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var list struct {
		Items []struct {
			Kind    string `json:"kind"`
			Summary struct{ Pass, Fail, Warn, Error, Skip int }
			Results []map[string]any `json:"results"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 4 {
		t.Fatalf("got %d reports, want 4 (2 Pods, 2 Deployments)", len(list.Items))
	}
	seen := map[string]bool{}
	for _, r := range list.Items {
		if r.Kind != "PolicyReport" {
			t.Errorf("a namespaced resource got a %s", r.Kind)
		}
		for _, res := range r.Results {
			seen[res["result"].(string)] = true
			if _, ok := res["scored"]; !ok {
				t.Errorf("result %v has no scored field (R16)", res)
			}
		}
	}
	for _, want := range []string{"pass", "fail", "warn", "skip"} {
		if !seen[want] {
			t.Errorf("the samples should show a %s result", want)
		}
	}
}

func TestScanWithoutInputCannotRun(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"scan", t.TempDir()}, &out, &errOut); code != exitCouldNotRun || !strings.Contains(errOut.String(), "nothing to scan") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// tally conformance against a cluster that does not answer stops at once
// with one line naming the server.
func TestConformanceStopsWhenTheClusterDoesNotAnswer(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	data := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: x}}]\n"
	if err := os.WriteFile(kubeconfig, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"conformance", "--kubeconfig", kubeconfig}, &out, &errOut)
	if code != exitCouldNotRun {
		t.Errorf("exit code %d, want %d", code, exitCouldNotRun)
	}
	if msg := strings.TrimSpace(errOut.String()); strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "cannot reach the cluster at https://127.0.0.1:1") {
		t.Errorf("stderr = %q, want one line saying the cluster cannot be reached", msg)
	}
	if out.Len() != 0 {
		t.Errorf("stdout = %q, want nothing: no case ran", out.String())
	}
}

// -o yaml and -o json print the same List; JSON manifests are read as YAML ones.
func TestScanOutputsOneListAndReadsJSON(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"policy.yaml": goodPolicy,
		"pod.json":    `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop", "labels": {"team": "a"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lists := map[string]map[string]any{}
	for _, format := range []string{"yaml", "json"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"scan", dir, "-o", format}, &out, &errOut); code != exitOK {
			t.Fatalf("-o %s: exit %d: %s", format, code, errOut.String())
		}
		var list map[string]any
		if err := sigsyaml.Unmarshal(out.Bytes(), &list); err != nil {
			t.Fatalf("-o %s: %v", format, err)
		}
		lists[format] = list
	}
	for format, list := range lists {
		items, _ := list["items"].([]any)
		if list["kind"] != "List" || len(items) != 1 {
			t.Errorf("-o %s: %v, want a List of the one report (of the JSON Pod)", format, list["kind"])
		}
	}
}

// One report is "1 report", not "1 reports".
func TestScanCountsInEnglish(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(goodPolicy+"---\n"+pod), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"scan", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.HasSuffix(out.String(), "\n1 report\n") {
		t.Errorf("output %q does not end with 1 report", out.String())
	}
}
