package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
