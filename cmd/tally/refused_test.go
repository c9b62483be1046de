package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-team}
spec:
  rules:
  - name: team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: need a team, pattern: {metadata: {labels: {team: "?*"}}}}
`

const typoPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: typo}
spec:
  validationFailureActoin: Enforce
  rules:
  - name: name
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`

const pod = `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {team: a}}
spec: {containers: [{name: c, image: nginx}]}
`

const testFile = `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: t}
policies: [good.yaml, typo.yaml]
resources: [pod.yaml]
results:
- {policy: require-team, rule: team, resources: [web], kind: Pod, result: pass}
- {policy: typo, rule: name, resources: [web], kind: Pod, result: pass}
`

// A policy a cluster would refuse makes apply, scan and test exit 1 with a
// line naming the file, the policy and the field path, while the other
// policies of the run are still evaluated and printed.
func TestRefusedPolicyExitsOneNamingFilePolicyAndField(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"good.yaml": goodPolicy, "typo.yaml": typoPolicy, "pod.yaml": pod, "kyverno-test.yaml": testFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	typo := filepath.Join(dir, "typo.yaml")
	cases := map[string]struct {
		args    []string
		stdout  string // the good policy's output
		stderrs []string
	}{
		"apply": {
			args:   []string{"apply", filepath.Join(dir, "good.yaml"), typo, "-r", filepath.Join(dir, "pod.yaml"), "--detailed-results"},
			stdout: "require-team",
		},
		"scan": {
			args:   []string{"scan", dir},
			stdout: "Pod/shop/web",
		},
		"test": {
			args:   []string{"test", dir},
			stdout: "passed",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errOut)
			if code != exitCouldNotRun {
				t.Errorf("exit %d, want %d", code, exitCouldNotRun)
			}
			msg := errOut.String()
			want := "invalid policy: " + typo + ": ClusterPolicy typo: spec.validationFailureActoin: unknown field"
			if !strings.Contains(msg, want) {
				t.Errorf("stderr %q does not contain %q", msg, want)
			}
			if !strings.Contains(msg, "1 policy refused") {
				t.Errorf("stderr %q does not end with the count of refused policies", msg)
			}
			if !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q lacks %q: the valid policy was not evaluated", out.String(), tc.stdout)
			}
		})
	}
}
