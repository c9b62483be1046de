package tester

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// maxFuzzFile bounds the inputs of FuzzLoadPolicies: a policy file of a
// few KiB reaches every path of the loader.
const maxFuzzFile = 64 << 10

// FuzzLoadPolicies runs the CLI's policy loading on arbitrary file content:
// multi-document YAML or JSON, decoded, checked against the CRD schema and
// Kyverno's rules, compiled. It must never panic or hang, and a policy it
// loads is either compiled or refused with a reason naming the file.
func FuzzLoadPolicies(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "config", "samples", "policies", "*.yaml"))
	for _, dir := range []string{
		"policy-library/best-practices/require-drop-all",
		"policy-library/other/restrict-annotations",
		"policy-library/pod-security/subrule",
	} {
		more, _ := filepath.Glob(filepath.Join("..", "..", "shared", "corpus", dir, "*.yaml"))
		seeds = append(seeds, more...)
	}
	// MutatingPolicies and a MutatingAdmissionPolicy (compiled by
	// Kubernetes' machinery).
	more, _ := filepath.Glob(filepath.Join("testdata", "mpol", "*", "policy.yaml"))
	seeds = append(seeds, more...)
	seeds = append(seeds, filepath.Join("testdata", "map", "policy.yaml"))
	for _, file := range seeds {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("kind: List\nitems: [{apiVersion: kyverno.io/v1, kind: Policy, metadata: {name: p}, spec: {rules: [{name: r}]}}]\n---\n{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzFile {
			t.Skip()
		}
		done := make(chan any, 1)
		go func() {
			defer func() { done <- recover() }()
			docs, err := DecodeDocuments("fuzz.yaml", data)
			if err != nil {
				return
			}
			for _, d := range docs {
				lp := loadPolicy(d, admissionBindings{})
				if lp.Policy != nil && (lp.Invalid != nil || lp.Unsupported != nil) {
					t.Errorf("policy %s both loaded and refused: %v %v", lp.Name, lp.Invalid, lp.Unsupported)
				}
				if lp.Policy == nil && lp.Invalid == nil && lp.Unsupported == nil {
					t.Errorf("policy %s neither loaded nor refused", lp.Name)
				}
			}
		}()
		select {
		case p := <-done:
			if p != nil {
				t.Fatalf("panic: %v", p)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("loading did not finish within 10s")
		}
	})
}
