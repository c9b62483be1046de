package main

import (
	"bytes"
	"context"
	"encoding/json"
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
