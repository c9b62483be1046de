package tester

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DeletingPolicy and JSON-payload expectations are evaluated: a wrong
// expected result fails, naming what the policy gave. A DeletingPolicy
// evaluates a JSON payload (its conditions alone) whatever its mode.
func TestDeletingAndJSONExpectationsAreEvaluated(t *testing.T) {
	outcomes := runTestFiles(t, map[string]string{
		"policy.yaml": `apiVersion: policies.kyverno.io/v1
kind: DeletingPolicy
metadata: {name: old-pods}
spec:
  schedule: "*/5 * * * *"
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], resources: [pods]}]
  conditions: [{name: old, expression: "object.metadata.labels.age == 'old'"}]
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: no-root-ca}
spec:
  evaluation: {mode: JSON}
  validations: [{expression: "object.ca.type != 'ROOT'", message: no root CA}]
---
apiVersion: policies.kyverno.io/v1
kind: DeletingPolicy
metadata: {name: root-cas}
spec:
  schedule: "0 * * * *"
  conditions: [{name: root, expression: "object.ca.type == 'ROOT'"}]
`,
		"pods.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default, labels: {age: old}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: default, labels: {age: new}}\n",
		"root.json": `{"ca": {"type": "ROOT"}}`,
		"sub.json":  `{"ca": {"type": "SUBORDINATE"}}`,
		TestFileName: `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: t}
policies: [policy.yaml]
resources: [pods.yaml]
jsonPayloads: [root.json, sub.json]
results:
- {policy: old-pods, isDeletingPolicy: true, resources: [a], kind: Pod, result: pass}
- {policy: old-pods, isDeletingPolicy: true, resources: [b], kind: Pod, result: pass}
- {policy: no-root-ca, isValidatingPolicy: true, resources: [sub.json], kind: "", result: pass}
- {policy: no-root-ca, isValidatingPolicy: true, resources: [root.json], kind: "", result: pass}
- {policy: root-cas, isDeletingPolicy: true, resources: [root.json], kind: "", result: pass}
- {policy: root-cas, isDeletingPolicy: true, resources: [sub.json], kind: "", result: pass}
`,
	})
	var got []string
	for _, o := range outcomes {
		got = append(got, o.Resource+"="+o.Status.String()+"/"+o.Got)
	}
	want := "a=pass/pass b=fail/fail sub.json=pass/pass root.json=fail/fail root.json=pass/pass sub.json=fail/fail"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %s, want %s (%+v)", strings.Join(got, " "), want, outcomes)
	}
}

// runTestFiles writes files (name: content) into a new folder and runs its
// TestFileName.
func runTestFiles(t *testing.T, files map[string]string) []Outcome {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outcomes, err := RunFile(context.Background(), filepath.Join(dir, TestFileName))
	if err != nil {
		t.Fatal(err)
	}
	return outcomes
}
