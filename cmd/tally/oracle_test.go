package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// KyvernoCLIEnv names Kyverno's own CLI (kubectl-kyverno, built by
// hack/kyverno/build.sh cli), the oracle of TestKyvernoCLIOracle.
const KyvernoCLIEnv = "TALLY_KYVERNO_CLI"

// TestKyvernoCLIOracle lets Kyverno's CLI judge tally's engine on
// resources varied at random (issue 55): the policies of
// testdata/oracle (anchors of every kind, anyPattern, foreach, deny,
// preconditions) are applied to generated Pods by `kyverno apply -p` and
// by `tally apply -p`, and every result and message must be the same. The
// seeds are fixed, so a failure is reproducible; TALLY_ORACLE_SEEDS=n runs
// n more.
func TestKyvernoCLIOracle(t *testing.T) {
	cli := os.Getenv(KyvernoCLIEnv)
	if cli == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: CI runs this test with Kyverno's CLI (make test)", KyvernoCLIEnv)
		}
		t.Skipf("%s is not set (bash hack/kyverno/build.sh cli prints the folder holding bin/cli)", KyvernoCLIEnv)
	}
	policies, err := filepath.Glob(filepath.Join("testdata", "oracle", "*.yaml"))
	if err != nil || len(policies) == 0 {
		t.Fatalf("no policies in testdata/oracle: %v", err)
	}
	seeds := []uint64{1, 2, 3}
	if n := os.Getenv("TALLY_ORACLE_SEEDS"); n != "" {
		var extra int
		fmt.Sscan(n, &extra)
		for i := range extra {
			seeds = append(seeds, uint64(100+i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			dir := t.TempDir()
			resources := filepath.Join(dir, "pods.yaml")
			if err := os.WriteFile(resources, randomPods(seed, 300), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"apply"}
			args = append(args, policies...)
			args = append(args, "--resource", resources, "-p")
			var kout, kerr bytes.Buffer
			cmd := exec.Command(cli, append(args, "--output-format", "json")...)
			cmd.Stdout, cmd.Stderr = &kout, &kerr
			// Kyverno's apply exits 1 when a result fails: only its output counts.
			_ = cmd.Run()
			want, err := reportResults(kout.Bytes())
			if err != nil {
				t.Fatalf("kyverno apply: %v\n%s", err, kerr.String())
			}
			var tout, terr bytes.Buffer
			runIO(context.Background(), append(args, "--output-format", "json"), strings.NewReader(""), &tout, &terr)
			got, err := reportResults(tout.Bytes())
			if err != nil {
				t.Fatalf("tally apply: %v\n%s", err, terr.String())
			}
			if len(want) < 1000 {
				t.Fatalf("Kyverno's CLI gave %d results: the oracle did not run\n%s", len(want), kerr.String())
			}
			var diffs []string
			for k, w := range want {
				if g := got[k]; g != w {
					diffs = append(diffs, fmt.Sprintf("%s:\n    kyverno: %s\n    tally:   %s", k, w, g))
				}
			}
			for k, g := range got {
				if _, ok := want[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s:\n    kyverno: (none)\n    tally:   %s", k, g))
				}
			}
			sort.Strings(diffs)
			t.Logf("seed %d: %d results compared, %d differ", seed, len(want), len(diffs))
			if len(diffs) > 0 {
				if len(diffs) > 10 {
					diffs = diffs[:10]
				}
				t.Errorf("tally differs from Kyverno's CLI (first %d):\n%s", len(diffs), strings.Join(diffs, "\n"))
			}
		})
	}
}

// reportResults reads a report's results: "policy/rule ns/name" to
// "result: message".
func reportResults(data []byte) (map[string]string, error) {
	var report struct {
		Results []struct {
			Policy, Rule, Result, Message string
			Resources                     []struct{ Namespace, Name string }
		}
	}
	if err := json.Unmarshal(data, &report); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range report.Results {
		for _, res := range r.Resources {
			out[r.Policy+"/"+r.Rule+" "+res.Namespace+"/"+res.Name] = r.Result + ": " + r.Message
		}
	}
	return out, nil
}

// randomPods writes n Pods varied at random from a seed: containers with
// and without names, images of several registries and tags, security
// contexts present, empty or absent, ports, init containers, host
// networking, volumes, labels.
func randomPods(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	pick := func(xs ...any) any { return xs[r.IntN(len(xs))] }
	container := func() map[string]any {
		c := map[string]any{"image": pick("nginx:latest", "nginx:1.2", "corp.io/app:1.0", "foo/bar", "busybox")}
		if r.Float64() < 0.9 {
			c["name"] = pick("foo", "foo-2", "bar", "baz", "istio-proxy")
		}
		switch x := r.Float64(); {
		case x < 0.3:
			c["securityContext"] = map[string]any{"privileged": pick(true, false)}
		case x < 0.5:
			caps := []any{}
			for range r.IntN(3) {
				caps = append(caps, pick("NET_ADMIN", "SYS_TIME", "CHOWN"))
			}
			c["securityContext"] = map[string]any{"runAsNonRoot": pick(true, false), "capabilities": map[string]any{"add": caps}}
		case x < 0.6:
			c["securityContext"] = map[string]any{}
		}
		if r.Float64() < 0.3 {
			ports := []any{}
			for range r.IntN(3) {
				ports = append(ports, map[string]any{"containerPort": pick(80, 8080, 22)})
			}
			c["ports"] = ports
		}
		return c
	}
	list := func(max int) []any {
		out := []any{}
		for range r.IntN(max + 1) {
			out = append(out, container())
		}
		return out
	}
	var docs []string
	for i := range n {
		spec := map[string]any{"containers": list(3)}
		if r.Float64() < 0.3 {
			spec["initContainers"] = list(2)
		}
		if r.Float64() < 0.3 {
			spec["hostNetwork"] = pick(true, false)
		}
		if r.Float64() < 0.3 {
			vols := []any{}
			for range r.IntN(3) {
				vols = append(vols, pick(map[string]any{"name": "v", "hostPath": map[string]any{"path": "/x"}}, map[string]any{"name": "e", "emptyDir": map[string]any{}}))
			}
			spec["volumes"] = vols
		}
		md := map[string]any{"name": fmt.Sprintf("p%d", i), "namespace": pick("default", "prod")}
		if r.Float64() < 0.5 {
			md["labels"] = map[string]any{"app": pick("web", "db"), "team": pick("a", "b")}
		}
		doc, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec})
		docs = append(docs, string(doc))
	}
	return []byte(strings.Join(docs, "\n---\n"))
}
