package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// A user's first hour (issue 24): what tally apply and tally test do with
// input that is not what they expect, and the exit codes a CI gate reads.
// Each case says what Kyverno's CLI 1.19 does where tally follows it; the
// deliberate differences are in docs/known-differences.md.
func TestCLISituations(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"policy.yaml": goodPolicy,
		"pod.yaml":    pod,
		"lone.yaml":   podWithoutTeam,
		// A Helm values file, JSON without kind, a document without apiVersion.
		"values.yaml":    "replicaCount: 2\nimage:\n  repository: nginx\n  tag: \"1.27\"\n",
		"nokind.json":    `{"apiVersion": "v1", "metadata": {"name": "x"}, "spec": {}}`,
		"noversion.yaml": pod + "---\nkind: Pod\nmetadata: {name: other}\n",
		"pass/kyverno-test.yaml": `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: pass}
policies: [../policy.yaml]
resources: [../pod.yaml]
results:
- {policy: require-team, rule: team, resources: [web], kind: Pod, result: pass}
`,
		"fail/kyverno-test.yaml": `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: fail}
policies: [../policy.yaml]
resources: [../pod.yaml]
results:
- {policy: require-team, rule: team, resources: [web], kind: Pod, result: fail}
`,
		"broken/kyverno-test.yaml":  "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nresults: [\n",
		"nottest/kyverno-test.yaml": "name: a test without apiVersion and kind\n",
		"values-as-resources/kyverno-test.yaml": `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: values-as-resources}
policies: [../policy.yaml]
resources: [../values.yaml]
results:
- {policy: require-team, rule: team, resources: [web], kind: Pod, result: pass}
`,
		"empty/README.md": "no tests here\n",
	}
	writeTree(t, dir, files)
	in := func(name string) string { return filepath.Join(dir, name) }
	tests := map[string]struct {
		args   []string
		stdin  string
		code   int
		stdout []string
		stderr []string
	}{
		// tally apply: input that is not Kubernetes YAML is an error naming
		// the file (Kyverno: exit 1, "Object 'Kind' is missing").
		"apply: a Helm values file as resources exits 1 naming it": {
			args: []string{"apply", in("policy.yaml"), "-r", in("values.yaml")}, code: 1,
			stderr: []string{"values.yaml: document 1 is not a Kubernetes object: 'apiVersion' and 'kind' are missing", "nothing to apply: 1 valid policy, 0 resources (1 input could not be used"},
		},
		"apply: JSON without kind exits 1 naming it": {
			args: []string{"apply", in("policy.yaml"), "-r", in("nokind.json")}, code: 1,
			stderr: []string{"nokind.json: document 1 is not a Kubernetes object: 'kind' is missing"},
		},
		"apply: a document without apiVersion exits 1, the others are applied": {
			args: []string{"apply", in("policy.yaml"), "-r", in("noversion.yaml")}, code: 1,
			stdout: []string{"pass: 1"}, stderr: []string{"noversion.yaml: document 2 is not a Kubernetes object: 'apiVersion' is missing", "1 input could not be used"},
		},
		"apply: standard input that is not Kubernetes YAML exits 1": {
			args: []string{"apply", in("policy.yaml"), "-r", "-"}, stdin: "replicaCount: 2\n", code: 1,
			stderr: []string{"-: document 1 is not a Kubernetes object"},
		},
		"apply: a Helm values file as the policy exits 1 naming it": {
			args: []string{"apply", in("values.yaml"), "-r", in("pod.yaml")}, code: 1,
			stderr: []string{"values.yaml: document 1 is not a Kubernetes object", "nothing to apply: 0 valid policies, 1 resource"},
		},
		"apply: policy and resource swapped says so": {
			args: []string{"apply", in("pod.yaml"), "-r", in("policy.yaml")}, code: 1,
			stderr: []string{"Pod web (v1) is not a policy", "policies and resources look swapped"},
		},
		"apply: a resource among the policies exits 1, the policies are applied": {
			args: []string{"apply", in("policy.yaml"), in("pod.yaml"), "-r", in("pod.yaml")}, code: 1,
			stdout: []string{"pass: 1"}, stderr: []string{"Pod web (v1) is not a policy"},
		},
		"apply: a pass exits 0": {
			args: []string{"apply", in("policy.yaml"), "-r", in("pod.yaml")}, code: 0,
		},
		"apply: a fail exits 1": {
			args: []string{"apply", in("policy.yaml"), "-r", in("lone.yaml")}, code: 1,
			stderr: []string{"1 failed, 0 erred"},
		},
		"apply: -t and --remove-color are accepted": {
			args: []string{"apply", in("policy.yaml"), "-r", in("pod.yaml"), "-t", "--remove-color"}, code: 0,
			stdout: []string{"pass: 1"},
		},
		"apply: -p keeps the exit code of a fail": {
			args: []string{"apply", in("policy.yaml"), "-r", in("lone.yaml"), "-p"}, code: 1,
			stdout: []string{"name: merged", "result: fail"},
		},

		// tally test: kyverno test's exit codes.
		"test: every expectation passes: exit 0": {
			args: []string{"test", in("pass")}, code: 0,
			stdout: []string{"1 passed, 0 failed"},
		},
		"test: a failed expectation exits 1 (Kyverno: 1)": {
			args: []string{"test", in("fail")}, code: 1,
			stdout: []string{"0 passed, 1 failed"},
		},
		"test: a test file that is not YAML exits 1 naming it, the others still run": {
			args: []string{"test", in("broken"), in("pass")}, code: 1,
			stdout: []string{"Test kyverno-test.yaml (pass): 1 passed"},
			stderr: []string{"broken/kyverno-test.yaml: document 1", "1 test could not be run"},
		},
		"test: a test file that is not a Test exits 1 naming it": {
			args: []string{"test", in("nottest")}, code: 1,
			stderr: []string{"nottest/kyverno-test.yaml: not a Test: apiVersion and kind are required"},
		},
		"test: a resource file that is not Kubernetes YAML exits 1 naming it": {
			args: []string{"test", in("values-as-resources")}, code: 1,
			stderr: []string{"values.yaml: document 1 is not a Kubernetes object", "1 test could not be run"},
		},
		"test: no test file exits 0 (Kyverno: 0)": {
			args: []string{"test", in("empty")}, code: 0,
			stderr: []string{"no kyverno-test.yaml found under"},
		},
		"test: no test file with --require-tests exits 1": {
			args: []string{"test", in("empty"), "--require-tests"}, code: 1,
			stderr: []string{"no kyverno-test.yaml found under", "--require-tests"},
		},
		"test: a path that does not exist exits 1": {
			args: []string{"test", in("nothere")}, code: 1,
			stderr: []string{"nothere"},
		},
		"test: -t selects with wildcards": {
			args: []string{"test", in("pass"), in("fail"), "-t", "policy=require-*, resource=web"}, code: 1,
			stdout: []string{"1 passed, 1 failed"},
		},
		"test: -t selecting nothing exits 0": {
			args: []string{"test", in("fail"), "-t", "policy=other"}, code: 0,
			stdout: []string{"0 passed, 0 failed"},
		},
		"test: --remove-color, --output-format and -o yaml are accepted": {
			args: []string{"test", in("pass"), "--remove-color", "--output-format", "yaml"}, code: 0,
			stdout: []string{"status: pass"},
		},
		"test: an unknown output format exits 1": {
			args: []string{"test", in("pass"), "-o", "markdown"}, code: 1,
			stderr: []string{`unknown output format "markdown"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cliCase{tc.args, tc.stdin, tc.code, tc.stdout, tc.stderr}.check(t)
		})
	}
}

// -p prints what Kyverno 1.19's CLI prints: one openreports.io
// ClusterReport named "merged" with the cluster-wide policies' results,
// each naming its resource, then a report per namespaced policy, named
// after it (a Report: Kyverno's CLI prints openreports.io/v1alpha1 with the
// kind PolicyReport there, which no API serves).
func TestApplyPolicyReportShape(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"cluster.yaml":    goodPolicy,
		"namespaced.yaml": strings.Replace(strings.Replace(goodPolicy, "kind: ClusterPolicy", "kind: Policy", 1), "metadata: {name: require-team}", "metadata: {name: team-in-shop, namespace: shop}", 1),
		"pods.yaml":       pod + "---\n" + podWithoutTeam,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	args := []string{"apply", filepath.Join(dir, "cluster.yaml"), filepath.Join(dir, "namespaced.yaml"), "-r", filepath.Join(dir, "pods.yaml"), "-p"}
	if code := run(context.Background(), args, &out, &errOut); code != exitCouldNotRun {
		t.Fatalf("exit %d, want 1 (a pod fails): %s", code, errOut.String())
	}
	type report struct {
		Kind     string
		Metadata struct{ Name, Namespace string }
		Results  []struct {
			Policy, Result string
			Resources      []struct{ Kind, Name, Namespace string }
		}
		Summary struct{ Pass, Fail int }
	}
	var reports []report
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		var r report
		if err := sigsyaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		reports = append(reports, r)
	}
	if len(reports) != 2 {
		t.Fatalf("got %d reports, want the merged one and one for the Policy:\n%s", len(reports), out.String())
	}
	merged, ns := reports[0], reports[1]
	if merged.Kind != "ClusterReport" || merged.Metadata.Name != "merged" || merged.Summary.Pass != 1 || merged.Summary.Fail != 1 || len(merged.Results) != 2 {
		t.Errorf("merged report: %+v", merged)
	}
	for _, r := range merged.Results {
		if r.Policy != "require-team" || len(r.Resources) != 1 || r.Resources[0].Kind != "Pod" || r.Resources[0].Namespace != "shop" {
			t.Errorf("merged result %+v: want require-team naming its Pod", r)
		}
	}
	if ns.Kind != "Report" || ns.Metadata.Name != "team-in-shop" || ns.Metadata.Namespace != "shop" || len(ns.Results) != 2 {
		t.Errorf("namespaced policy's report: %+v", ns)
	}
}

// cliCase is a command line, its standard input, and what it must do: its
// exit code and substrings of its output.
type cliCase struct {
	args           []string
	stdin          string
	code           int
	stdout, stderr []string
}

// check runs the command line, checks its exit code and output, and
// returns its standard output.
func (c cliCase) check(t *testing.T) string {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runIO(context.Background(), c.args, strings.NewReader(c.stdin), &out, &errOut)
	if code != c.code {
		t.Errorf("exit %d, want %d (stderr %q)", code, c.code, errOut.String())
	}
	for _, want := range c.stdout {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range c.stderr {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	return out.String()
}

// writeTree writes files (path relative to dir: content), making their folders.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
