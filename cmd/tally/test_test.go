package main

import (
	"path/filepath"
	"strings"
	"testing"
)

const twoResultsTest = `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: two}
policies: [../good.yaml]
resources: [../pods.yaml]
results:
- {policy: require-team, rule: team, resources: [web], kind: Pod, result: pass}
- {policy: require-team, rule: team, resources: [lone], kind: Pod, result: pass}
`

const mutateTest = `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: mutating}
policies: [../good.yaml]
resources: [../pods.yaml]
results:
- {policy: require-team, rule: team, resources: [web], kind: Pod, result: pass, patchedResources: patched.yaml}
`

// mutatePolicy has only a mutate rule.
const mutatePolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: add-labels}
spec:
  background: true
  rules:
  - name: add-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchStrategicMerge: {metadata: {labels: {team: web}}}
`

// generatePolicy has only a generate rule: tally test evaluates it, tally
// apply and the scanner leave it out (R46).
const generatePolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: add-quota}
spec:
  rules:
  - name: quota
    match: {any: [{resources: {kinds: [Pod]}}]}
    generate:
      apiVersion: v1
      kind: ResourceQuota
      name: q
      namespace: default
      data: {spec: {hard: {pods: "10"}}}
`

const mutatedTest = `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: mutated}
policies: [../mutating.yaml]
resources: [../pods.yaml]
results:
- {policy: add-labels, rule: add-team, resources: [web], kind: Pod, result: pass, patchedResources: patched.yaml}
`

const leftOutTest = `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: left-out}
policies: [../generating.yaml]
resources: [../pods.yaml]
results:
- {policy: add-quota, rule: quota, resources: [web], kind: Pod, result: pass}
`

// tally test takes kyverno test's flags: a table per test file named
// relative to the path given, --test-case-selector, --fail-only,
// --detailed-results, --require-tests, --file-name; unsupported
// expectations are counted apart and fail the run (exit 1, as a failed
// expectation: kyverno test's exit codes).
func TestTestFlagsAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"good.yaml": goodPolicy, "pods.yaml": pod + "---\n" + podWithoutTeam,
		"two/kyverno-test.yaml": twoResultsTest, "mutate/kyverno-test.yaml": mutateTest,
		"other/my-test.yaml": strings.Replace(twoResultsTest, "name: two", "name: renamed", 1),
		"mutating.yaml":      mutatePolicy, "left-out/kyverno-test.yaml": leftOutTest,
		"generating.yaml":                 generatePolicy,
		"mutated/kyverno-test.yaml":       mutatedTest,
		"mutated/patched.yaml":            strings.Replace(pod, "team: a", "team: web", 1),
		"mutated-wrong/kyverno-test.yaml": mutatedTest,
		"mutated-wrong/patched.yaml":      pod,
	}
	writeTree(t, dir, files)
	two := filepath.Join(dir, "two")
	tests := map[string]struct {
		args      []string
		code      int
		stdout    []string
		notStdout []string
		stderr    []string
	}{
		"a table per test, named relative to the path given; a failure exits 1, as kyverno test": {
			args: []string{"test", two}, code: 1,
			stdout:    []string{"Test kyverno-test.yaml (two): 1 passed, 1 failed, 0 skipped", "ID", "Pass    Ok", "Fail", "1 passed, 1 failed, 0 skipped"},
			notStdout: []string{dir},
		},
		"--test-case-selector runs only what it selects": {
			args: []string{"test", two, "-t", "policy=require-team, rule=team, resource=web"}, code: 0,
			stdout: []string{"1 passed, 0 failed, 0 skipped"}, notStdout: []string{"lone"},
		},
		"a bad selector cannot run": {
			args: []string{"test", two, "-t", "color=red"}, code: 1,
			stderr: []string{`unknown key "color"`},
		},
		"--fail-only lists the failures alone": {
			args: []string{"test", two, "--fail-only"}, code: 1,
			stdout: []string{"lone", "Fail"}, notStdout: []string{"web"},
		},
		"--detailed-results shows expected and actual results": {
			args: []string{"test", two, "--detailed-results"}, code: 1,
			stdout: []string{"EXPECTED", "GOT", "validation error: need a team"},
		},
		"--require-tests fails a run that selected nothing": {
			args: []string{"test", two, "-t", "policy=nothing", "--require-tests"}, code: 1,
			stderr: []string{"no test was run"},
		},
		"--file-name finds tests of another name": {
			args: []string{"test", dir, "--file-name", "my-test.yaml"}, code: 1,
			stdout: []string{"Test other/my-test.yaml (renamed)"},
		},
		"unsupported expectations are counted apart, and fail the run": {
			args: []string{"test", filepath.Join(dir, "mutate")}, code: 1,
			stdout: []string{"Unsupported", "0 passed, 0 failed, 0 skipped, 1 unsupported"},
		},
		"a classic generate expectation is evaluated": {
			args: []string{"test", filepath.Join(dir, "left-out")}, code: 0,
			stdout: []string{"add-quota", "1 passed, 0 failed, 0 skipped"},
		},
		"a classic mutate expectation is evaluated, the patched resource compared whole": {
			args: []string{"test", filepath.Join(dir, "mutated")}, code: 0,
			stdout: []string{"add-labels", "1 passed, 0 failed, 0 skipped"},
		},
		"a patched resource that differs fails": {
			args: []string{"test", filepath.Join(dir, "mutated-wrong")}, code: 1,
			stdout: []string{"the mutated resource differs from patchedResources patched.yaml at .metadata.labels.team", "0 passed, 1 failed, 0 skipped"},
		},
		"tally apply prints the resources generate rules would create, as kyverno apply": {
			args: []string{"apply", filepath.Join(dir, "generating.yaml"), "--resource", filepath.Join(dir, "pods.yaml")}, code: 0,
			stdout: []string{"policy add-quota applied to shop/Pod/web:", "kind: ResourceQuota", "Generate:\nGeneration completed successfully."},
		},
		"tally apply prints mutated resources, as kyverno apply": {
			args: []string{"apply", filepath.Join(dir, "mutating.yaml"), "--resource", filepath.Join(dir, "pods.yaml")}, code: 0,
			stdout: []string{"policy add-labels applied to shop/Pod/web:", "team: web", "Mutation:\nMutation has been applied successfully."},
		},
		"-o junit": {
			args: []string{"test", two, "-o", "junit"}, code: 1,
			stdout: []string{"<testsuites", `failures="1"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := cliCase{args: tc.args, code: tc.code, stdout: tc.stdout, stderr: tc.stderr}.check(t)
			for _, not := range tc.notStdout {
				if strings.Contains(out, not) {
					t.Errorf("stdout has %q:\n%s", not, out)
				}
			}
		})
	}
}
