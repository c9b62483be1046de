package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
)

// Input bounds of the fuzz targets: large inputs only slow the fuzzer down
// (a resource or policy of a few KiB reaches every code path).
const (
	maxFuzzPolicy   = 32 << 10
	maxFuzzResource = 32 << 10
)

// fuzzCorpusPolicies are policies of Kyverno's library (../shared/corpus)
// that cover foreach, preconditions, deny with quantities, anyPattern,
// anchors and podSecurity; their test resources seed the resources.
var fuzzCorpusPolicies = []string{
	"policy-library/best-practices/require-drop-all",
	"policy-library/best-practices/disallow-cri-sock-mount",
	"policy-library/other/memory-requests-equal-limits",
	"policy-library/other/ensure-readonly-hostpath",
	"policy-library/other/metadata-match-regex",
	"policy-library/other/restrict-annotations",
	"policy-library/pod-security/restricted/require-run-as-non-root-user",
	"policy-library/pod-security/subrule",
}

// fuzzSeeds returns the seed policies and resources, each a YAML or JSON
// document: the shipped samples, and the corpus policies above when the
// corpus is beside the repository.
func fuzzSeeds(f *testing.F) (policies, resources [][]byte) {
	f.Helper()
	read := func(glob string, into *[][]byte) {
		files, _ := filepath.Glob(glob) // only a malformed pattern fails: these are constant
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
			for {
				doc, err := r.Read()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					f.Fatal(err)
				}
				if len(bytes.TrimSpace(doc)) > 0 && len(doc) <= maxFuzzPolicy {
					*into = append(*into, doc)
				}
			}
		}
	}
	read(filepath.Join("..", "config", "samples", "policies", "*.yaml"), &policies)
	read(filepath.Join("..", "config", "samples", "resources", "*.yaml"), &resources)
	corpus := filepath.Join("..", "..", "shared", "corpus")
	for _, dir := range fuzzCorpusPolicies {
		read(filepath.Join(corpus, dir, "*.yaml"), &policies)
		read(filepath.Join(corpus, dir, ".kyverno-test", "resource*.yaml"), &resources)
		read(filepath.Join(corpus, dir, "resource*.yaml"), &resources)
	}
	return policies, resources
}

// FuzzCheckPolicy decodes arbitrary bytes as a policy (YAML or JSON) and
// runs every check a policy goes through before use: the CRD schema
// (CheckObject), compilation, Malformed, ValidateBackground. None may
// panic or hang, whatever the input.
func FuzzCheckPolicy(f *testing.F) {
	policies, _ := fuzzSeeds(f)
	for _, p := range policies {
		f.Add(p)
	}
	f.Add([]byte(`{"apiVersion":"kyverno.io/v1","kind":"ClusterPolicy","spec":{"rules":[{"name":"r","validate":{"pattern":{"=(a":1}}}]}}`))
	f.Add([]byte("kind: Policy\nspec: {rules: [{name: r, match: {}, validate: {deny: {conditions: [{operator: 1}]}}}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzPolicy {
			t.Skip()
		}
		withDeadline(t, 10*time.Second, func() {
			var obj map[string]any
			if yaml.Unmarshal(data, &obj) == nil && obj != nil {
				_ = engine.CheckObject(obj) // refusals are fine; panics are not
			}
			var cp kyvernov1.ClusterPolicy
			if err := yaml.Unmarshal(data, &cp); err != nil {
				return
			}
			_ = engine.ValidateBackground(&cp.Spec)
			p, err := engine.CompileClusterPolicy(&cp)
			if err != nil {
				return
			}
			_ = engine.Malformed(p)
		})
	})
}

// FuzzEvaluate evaluates policies on arbitrary resources, in background
// scans and at admission (mode picks the request): the engine must never
// panic or hang, and every result must name its policy and one of its rules.
func FuzzEvaluate(f *testing.F) {
	policies, resources := fuzzSeeds(f)
	resources = append(resources, []byte(`{"kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","image":"nginx:latest"}]}}`))
	for i, p := range policies {
		for j, r := range resources {
			// Every policy with a couple of resources, not the whole product.
			if (i+j)%len(policies) < 2 {
				f.Add(p, r, uint8(j))
			}
		}
	}
	f.Fuzz(func(t *testing.T, policy, resource []byte, mode uint8) {
		if len(policy) > maxFuzzPolicy || len(resource) > maxFuzzResource {
			t.Skip()
		}
		var cp kyvernov1.ClusterPolicy
		if err := yaml.Unmarshal(policy, &cp); err != nil {
			t.Skip()
		}
		p, err := engine.CompileClusterPolicy(&cp)
		if err != nil {
			t.Skip()
		}
		var obj map[string]any
		if err := yaml.Unmarshal(resource, &obj); err != nil || obj == nil {
			t.Skip()
		}
		// The old object of an UPDATE or DELETE is a copy: it must not
		// alias the new one.
		old := deepCopy(t, obj)
		req := &engine.Request{Object: obj, Background: mode%4 == 0, NamespaceLabels: map[string]string{"env": "prod"}}
		switch mode % 4 {
		case 1:
			req.UserInfo = &engine.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}, Roles: []string{"ns:r"}}
		case 2:
			req.Operation, req.OldObject = engine.OpUpdate, old
		case 3:
			req.Operation, req.Object, req.OldObject = engine.OpDelete, nil, old
		}
		withDeadline(t, 10*time.Second, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, r := range p.Evaluate(ctx, req) {
				if r.Policy != p.Name || p.Rule(r.Rule) == nil || r.Result == "" {
					t.Errorf("result not of a rule of policy %q, or without result: %+v", p.Name, r)
				}
			}
		})
	})
}

func deepCopy(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Skip() // YAML can hold what JSON cannot (non-string keys): not a resource
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// withDeadline runs f and fails the test if it panics (the fuzzer reports
// it) or runs past d: no input may make the engine hang, and the fuzzer
// has no per-input limit of its own.
func withDeadline(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		f()
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("panic: %v", p)
		}
	case <-time.After(d):
		t.Fatalf("did not finish within %s", d)
	}
}

// FuzzParseAPIPath: whatever the spelling (fragments, dot segments,
// escapes, empty segments, backslashes), a path ParseAPIPath accepts is
// sent as it is read: cleaning and unescaping change nothing, and a path
// InNamespacePath says stays in team-a does, once cleaned as Kubernetes'
// clients clean it (issue 53).
func FuzzParseAPIPath(f *testing.F) {
	for _, s := range []string{
		"/api/v1/namespaces/team-a/configmaps/x",
		"/api/v1/namespaces/team-a/configmaps/x#/../../../../api/v1/namespaces/team-b/configmaps/y",
		"/api/v1/namespaces/team-a/configmaps/%2e%2e/%2e%2e/team-b",
		"/api/v1/namespaces/team-a%2F..%2Fteam-b/configmaps",
		"/api/v1/namespaces/team-a/../team-b/configmaps",
		"/api/v1/namespaces/team-a//configmaps",
		"/api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb",
		"/apis/apps/v1/namespaces/team-a/deployments?watch=1",
		"/api/v1/watch/namespaces/team-a/pods",
		"//evil/api/v1/namespaces/team-a",
		"/api/v1/namespaces/team-a/configmaps/x?#",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := engine.ParseAPIPath(s)
		if err != nil {
			return
		}
		if strings.ContainsAny(p.Path, "#%\\? ") || path.Clean(p.Path) != p.Path {
			t.Fatalf("ParseAPIPath(%q) accepted %q, which is not sent as read", s, p.Path)
		}
		u, err := url.Parse(p.Path)
		if err != nil || u.Path != p.Path || u.RawPath != "" || u.Fragment != "" {
			t.Fatalf("ParseAPIPath(%q) accepted %q, which parses as %q", s, p.Path, u)
		}
		if engine.InNamespacePath(p.Path, "team-a") {
			sent := path.Join("/", p.Path)
			if !strings.HasPrefix(sent, "/api/v1/namespaces/team-a") && !strings.Contains(sent, "/namespaces/team-a") {
				t.Fatalf("%q is said to stay in team-a, but %q is sent", s, sent)
			}
			segs := strings.Split(sent[1:], "/")
			if (segs[0] == "api" && segs[3] != "team-a") || (segs[0] == "apis" && segs[4] != "team-a") {
				t.Fatalf("%q is said to stay in team-a, but %q is sent", s, sent)
			}
		}
	})
}
