package tester

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// MutatingPolicy expectations in Kyverno's test format are evaluated
// (R46): the policy is applied with Kubernetes' patchers and the mutated
// resource compared with patchedResources.
func TestMutatingPolicyExpectations(t *testing.T) {
	for _, dir := range []string{"add-labels", "json-patch", "namespaced", "exception"} {
		outcomes, err := RunFile(context.Background(), filepath.Join("testdata", "mpol", dir, TestFileName))
		if err != nil {
			t.Fatal(err)
		}
		if len(outcomes) == 0 {
			t.Fatalf("%s: no outcomes", dir)
		}
		for _, o := range outcomes {
			if o.Status != Passed {
				t.Errorf("%s: %s on %s: expected %s, got %s %s (%s)", dir, o.Policy, o.Resource, o.Expected, o.Got, o.Status, o.Reason)
			}
		}
	}
}

// A wrong patchedResources document, or a wrong result, fails the
// expectation, naming where the mutated resource differs.
func TestMutatingPolicyWrongExpectationsFail(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"policy.yaml", "resources.yaml", "patched.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "mpol", "add-labels", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "patched.yaml" {
			data = []byte(strings.Replace(string(data), "labels: {team: payments}", "labels: {team: search}", 1))
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	test := `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: wrong}
policies: [policy.yaml]
resources: [resources.yaml]
results:
- {isMutatingPolicy: true, policy: add-team-label, resources: [unlabelled], kind: Pod, patchedResources: patched.yaml, result: pass}
- {isMutatingPolicy: true, policy: add-team-label, resources: [labelled], kind: Pod, result: skip}
`
	file := filepath.Join(dir, TestFileName)
	if err := os.WriteFile(file, []byte(test), 0o600); err != nil {
		t.Fatal(err)
	}
	outcomes, err := RunFile(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	if len(outcomes) != 2 {
		t.Fatalf("%d outcomes, want 2", len(outcomes))
	}
	if o := outcomes[0]; o.Status != Failed || !strings.Contains(o.Reason, "differs from patchedResources patched.yaml at .metadata.labels.team") {
		t.Errorf("wrong patch: got %s (%s)", o.Status, o.Reason)
	}
	if o := outcomes[1]; o.Status != Failed || o.Got != "pass" {
		t.Errorf("wrong result: got %s %s (%s)", o.Status, o.Got, o.Reason)
	}
}

// A MutatingAdmissionPolicy is applied through its binding with its params
// (isMutatingAdmissionPolicy expectations, patchedResources compared), and
// scanned as Kyverno's reports controller scans it (R44): rule = the
// policy's name, property mapBinding, "mutation is not applied" when its
// mutation would change the resource, skip "match conditions aren't met".
func TestMutatingAdmissionPolicy(t *testing.T) {
	l := runAndLoad(t, filepath.Join("testdata", "map", TestFileName), 2)
	want := map[string]engine.RuleResult{
		"api":    {Result: engine.Fail, Message: "mutation is not applied"},
		"legacy": {Result: engine.Skip, Message: "match conditions aren't met"},
	}
	for _, r := range l.resources {
		got := l.evaluate(context.Background(), l.policies[0], r, "")
		if len(got) != 1 {
			t.Fatalf("%s: %d results %+v, want 1", r.name, len(got), got)
		}
		g, w := got[0], want[r.name]
		if g.Result != w.Result || g.Message != w.Message || g.Rule != "set-env-label" || g.Policy != "set-env-label" ||
			g.Source != engine.SourceMutatingAdmissionPolicy || g.Properties[engine.PropertyMAPBinding] != "set-env-label-prod" {
			t.Errorf("%s: got %+v, want %s %q, rule set-env-label, mapBinding set-env-label-prod", r.name, g, w.Result, w.Message)
		}
	}
}

// A NamespacedMutatingPolicy applies in its own namespace only.
func TestNamespacedMutatingPolicyStaysInItsNamespace(t *testing.T) {
	l := runAndLoad(t, filepath.Join("testdata", "mpol", "namespaced", TestFileName), 2)
	for _, r := range l.resources {
		_, _, matched := l.policies[0].Policy.Mutate(context.Background(), l.request(l.policies[0], r, ""))
		if want := r.namespace == "shop"; matched != want {
			t.Errorf("%s/%s: applied %v, want %v", r.namespace, r.name, matched, want)
		}
	}
}

// A mutateExisting MutatingPolicy's expectation names the target it
// mutated: its patchedResources compared; a wrong patch or result fails,
// and a target expression that reads nothing is an error, never a pass.
func TestMutatingPolicyMutateExistingTargets(t *testing.T) {
	run := func(t *testing.T, edit func(name, text string) string, results string) []Outcome {
		dir := t.TempDir()
		for _, f := range []string{"policy.yaml", "trigger.yaml", "targets.yaml", "patched.yaml"} {
			data, err := os.ReadFile(filepath.Join("testdata", "mpol", "existing", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte(edit(f, string(data))), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		test := "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: existing}\npolicies: [policy.yaml]\nresources: [trigger.yaml]\ntargetResources: [targets.yaml]\nresults:\n" + results
		file := filepath.Join(dir, TestFileName)
		if err := os.WriteFile(file, []byte(test), 0o600); err != nil {
			t.Fatal(err)
		}
		outcomes, err := RunFile(context.Background(), file)
		if err != nil {
			t.Fatal(err)
		}
		return outcomes
	}
	same := func(_, text string) string { return text }
	expect := "- {isMutatingPolicy: true, policy: label-target, resources: [team/target-s], kind: ConfigMap, patchedResources: patched.yaml, result: pass}\n"

	if o := run(t, same, expect); len(o) != 1 || o[0].Status != Passed || o[0].Got != "pass" {
		t.Fatalf("the mutated target: %+v", o)
	}
	wrongPatch := func(name, text string) string {
		if name == "patched.yaml" {
			return strings.Replace(text, "from: secret", "from: elsewhere", 1)
		}
		return text
	}
	if o := run(t, wrongPatch, expect); len(o) != 1 || o[0].Status != Failed || !strings.Contains(o[0].Reason, ".metadata.labels.from") {
		t.Fatalf("a wrong patchedResources: %+v", o)
	}
	if o := run(t, same, strings.Replace(expect, "result: pass", "result: skip", 1)); len(o) != 1 || o[0].Status != Failed || o[0].Got != "pass" {
		t.Fatalf("a wrong result: %+v", o)
	}
	readsNothing := func(name, text string) string {
		if name == "policy.yaml" {
			return strings.Replace(text, `"target-" +`, `"absent-" +`, 1)
		}
		return text
	}
	if o := run(t, readsNothing, expect); len(o) != 1 || o[0].Status != Failed || o[0].Got != "error" || !strings.Contains(o[0].Reason, "not found") {
		t.Fatalf("a target expression reading nothing: %+v", o)
	}
}
