package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

const auditPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: audit-team}
spec:
  validationFailureAction: Audit
  rules:
  - name: team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: need a team, pattern: {metadata: {labels: {team: "?*"}}}}
`

const enforcePolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: enforce-team}
spec:
  validationFailureAction: Enforce
  rules:
  - name: team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: need a team, pattern: {metadata: {labels: {team: "?*"}}}}
`

const errorPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: erring}
spec:
  rules:
  - name: missing-key
    match: {any: [{resources: {kinds: [Pod]}}]}
    preconditions: {all: [{key: "{{ request.object.metadata.labels.nothere }}", operator: Equals, value: x}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`

const podWithoutTeam = `apiVersion: v1
kind: Pod
metadata: {name: lone, namespace: shop}
spec: {containers: [{name: c, image: nginx}]}
`

// allowedPolicy reads a ConfigMap a values file (or --set) stands for.
const allowedPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: allowed-image}
spec:
  rules:
  - name: image
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: settings
      configMap: {name: settings, namespace: default}
    validate:
      message: "image must be {{ settings.data.image }}"
      deny: {conditions: {any: [{key: "{{ request.object.spec.containers[0].image }}", operator: NotEquals, value: "{{ settings.data.image }}"}]}}
`

// allowedContext is a context file holding the ConfigMap allowedPolicy reads.
const allowedContext = `apiVersion: cli.kyverno.io/v1alpha1
kind: Context
metadata: {name: context}
spec:
  resources:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: settings, namespace: default}
    data: {image: nginx}
`

const allowedValues = `apiVersion: cli.kyverno.io/v1alpha1
kind: Values
globalValues:
  settings.data.image: nginx
`

// adminsPolicy passes only for members of the admins group.
const adminsPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: admins-only}
spec:
  background: false
  rules:
  - name: admins
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "only admins"
      deny: {conditions: {all: [{key: admins, operator: AnyNotIn, value: "{{ request.userInfo.groups }}"}]}}
`

const userInfo = `apiVersion: cli.kyverno.io/v1alpha1
kind: UserInfo
userInfo:
  username: alice
  groups: [admins]
`

// scalePolicy matches the scale subresource of Deployments; scaleObject is
// such a subresource's object, which scaleValues maps to deployments/scale.
const scalePolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: restrict-scale}
spec:
  background: false
  rules:
  - name: scale-max-eight
    match: {any: [{resources: {kinds: [Deployment/scale]}}]}
    validate: {message: at most 8 replicas, pattern: {spec: {replicas: "<9"}}}
`

const scaleObject = `apiVersion: autoscaling/v1
kind: Scale
metadata: {name: web, namespace: shop}
spec: {replicas: 9}
`

const scaleValues = `apiVersion: cli.kyverno.io/v1alpha1
kind: Values
subresources:
- subresource: {name: deployments/scale, kind: Scale, group: autoscaling, version: v1}
  parentResource: {name: deployments, kind: Deployment, group: apps, version: v1}
`

// tally apply takes the Kyverno CLI's flags and gives its exit codes: 0
// when nothing failed, 1 on a fail or error result or unreadable input,
// --warn-exit-code for warnings alone; bad input is named on stderr.
func TestApplyFlagsAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"good.yaml": goodPolicy, "audit.yaml": auditPolicy, "enforce.yaml": enforcePolicy, "erring.yaml": errorPolicy,
		"pod.yaml": pod, "lone.yaml": podWithoutTeam, "broken.yaml": "kind: Pod\nmetadata: [\n", "empty.yaml": "",
		"allowed.yaml": allowedPolicy, "values.yaml": allowedValues, "context.yaml": allowedContext, "user.yaml": userInfo, "admins.yaml": adminsPolicy,
		"scale-policy.yaml": scalePolicy, "scale.yaml": scaleObject, "scale-values.yaml": scaleValues,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	in := func(name string) string { return filepath.Join(dir, name) }
	tests := map[string]struct {
		args   []string
		stdin  string
		code   int
		stdout []string
		stderr []string
	}{
		"a pass exits 0 and lists nothing but the summary": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml")}, code: 0,
			stdout: []string{"pass: 1, fail: 0, warn: 0, error: 0, skip: 0"},
		},
		"--detailed-results lists the passes": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "--detailed-results"}, code: 0,
			stdout: []string{"Pod/shop/web", "require-team", "pass"},
		},
		"--policy works as the arguments do": {
			args: []string{"apply", "--policy", in("good.yaml"), "-r", in("pod.yaml")}, code: 0,
			stdout: []string{"pass: 1"},
		},
		"a fail exits 1 and is listed": {
			args: []string{"apply", in("good.yaml"), "-r", in("lone.yaml")}, code: 1,
			stdout: []string{"Pod/shop/lone", "require-team", "fail", "pass: 0, fail: 1"},
			stderr: []string{"1 failed, 0 erred"},
		},
		"--audit-warn turns an Audit failure into a warning: exit 0": {
			args: []string{"apply", in("audit.yaml"), "-r", in("lone.yaml"), "--audit-warn"}, code: 0,
			stdout: []string{"warn", "fail: 0, warn: 1"},
		},
		"--warn-exit-code gives warnings their exit code": {
			args: []string{"apply", in("audit.yaml"), "-r", in("lone.yaml"), "--audit-warn", "--warn-exit-code", "3"}, code: 3,
		},
		"--audit-warn leaves Enforce failures failures": {
			args: []string{"apply", in("enforce.yaml"), "-r", in("lone.yaml"), "--audit-warn", "--warn-exit-code", "3"}, code: 1,
			stdout: []string{"fail: 1"},
		},
		"an error result exits 1": {
			args: []string{"apply", in("erring.yaml"), "-r", in("pod.yaml")}, code: 1,
			stdout: []string{"error"}, stderr: []string{"0 failed, 1 erred"},
		},
		"resources from standard input": {
			args: []string{"apply", in("good.yaml"), "-r", "-"}, stdin: podWithoutTeam, code: 1,
			stdout: []string{"Pod/shop/lone"},
		},
		"a missing resource file exits 1 naming it, the rest still applied": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "-r", in("nothere.yaml")}, code: 1,
			stdout: []string{"pass: 1"}, stderr: []string{"nothere.yaml", "1 input could not be used"},
		},
		"broken YAML exits 1 naming the file": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "-r", in("broken.yaml")}, code: 1,
			stderr: []string{"broken.yaml"},
		},
		"an empty resource file leaves nothing to apply: exit 1": {
			args: []string{"apply", in("good.yaml"), "-r", in("empty.yaml")}, code: 1,
			stderr: []string{"nothing to apply: 1 valid policy, 0 resources"},
		},
		"no policy at all: exit 1 saying how to give one": {
			args: []string{"apply", "-r", in("pod.yaml")}, code: 1,
			stderr: []string{"no policy given"},
		},
		"a resource file as policy is no policy: exit 1": {
			args: []string{"apply", in("pod.yaml"), "-r", in("pod.yaml")}, code: 1,
			stderr: []string{"Pod web (v1) is not a policy", "nothing to apply: 0 valid policies, 1 resource"},
		},
		"-o json has the report's field names": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "--output-format", "json"}, code: 0,
			stdout: []string{`"policy": "require-team"`, `"rule": "team"`, `"result": "pass"`, `"resource": "Pod/shop/web"`},
		},
		"-p --report-api openreports prints an openreports.io ClusterReport": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "-p", "--report-api", "openreports"}, code: 0,
			stdout: []string{"apiVersion: openreports.io/v1alpha1", "kind: ClusterReport", "name: merged", "policy: require-team"},
		},
		"an unknown --report-api exits 1 naming it": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "-p", "--report-api", "polr"}, code: 1,
			stderr: []string{`report API "polr"`},
		},
		"-f gives the variables a cluster would: the policy passes": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml"), "-f", in("values.yaml")}, code: 0,
			stdout: []string{"pass: 1, fail: 0"},
		},
		"--set gives global variables: the policy fails": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml"), "--set", "settings.data.image=other"}, code: 1,
			stdout: []string{"fail: 1"},
		},
		"--set wins over the values file": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml"), "-f", in("values.yaml"), "--set", "settings.data.image=other"}, code: 1,
			stdout: []string{"fail: 1"},
		},
		"a --set without = exits 1 naming it": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml"), "--set", "novalue"}, code: 1,
			stderr: []string{`--set "novalue": want key=value`},
		},
		"a missing values file exits 1 naming it": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml"), "-f", in("nothere.yaml")}, code: 1,
			stderr: []string{"--values-file", "nothere.yaml"},
		},
		"--context-file gives the objects policies read: the policy passes": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml"), "--context-file", in("context.yaml")}, code: 0,
			stdout: []string{"pass: 1, fail: 0"},
		},
		"an object the context lacks is an error naming it": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml"), "--context-file", in("pod.yaml")}, code: 1,
			stdout: []string{"configmap default/settings not found in the context", "error: 1"},
		},
		"without values or context, the entry is not loaded, as in Kyverno's CLI: reading it is an unknown key, never a silent value": {
			args: []string{"apply", in("allowed.yaml"), "-r", in("pod.yaml")}, code: 1,
			stdout: []string{`failed to resolve settings.data.image at path : JMESPath query failed: Unknown key "settings" in path`, "error: 1"},
		},
		"scan takes the context file too": {
			args: []string{"scan", in("allowed.yaml"), in("pod.yaml"), "--context-file", in("context.yaml"), "-o", "yaml"}, code: 0,
			stdout: []string{"policy: allowed-image", "result: pass"},
		},
		"-u gives the requesting user": {
			args: []string{"apply", in("admins.yaml"), "-r", in("pod.yaml"), "-u", in("user.yaml")}, code: 0,
			stdout: []string{"pass: 1, fail: 0"},
		},
		"without -u the policy does not pass": {
			args: []string{"apply", in("admins.yaml"), "-r", in("pod.yaml")}, code: 1,
		},
		"-f's subresources make a Scale the scale subresource of a Deployment": {
			args: []string{"apply", in("scale-policy.yaml"), "-r", in("scale.yaml"), "-f", in("scale-values.yaml")}, code: 1,
			stdout: []string{"Scale/shop/web", "scale-max-eight", "fail: 1"},
		},
		"without the values' subresources a Scale is no Deployment's": {
			args: []string{"apply", in("scale-policy.yaml"), "-r", in("scale.yaml")}, code: 0,
			stdout: []string{"pass: 0, fail: 0"},
		},
		"-p prints one merged openreports.io ClusterReport, as Kyverno 1.19's CLI": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "-p"}, code: 0,
			stdout: []string{"apiVersion: openreports.io/v1alpha1", "kind: ClusterReport", "name: merged", "policy: require-team", "name: web", "pass: 1"},
		},
		"-p --report-api wgpolicyk8s prints one merged ClusterPolicyReport": {
			args: []string{"apply", in("good.yaml"), "-r", in("pod.yaml"), "-p", "--report-api", "wgpolicyk8s"}, code: 0,
			stdout: []string{"kind: ClusterPolicyReport", "name: merged", "policy: require-team", "name: web", "pass: 1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := cliCase{tc.args, tc.stdin, tc.code, tc.stdout, tc.stderr}.check(t)
			if strings.Contains(out, `"Policy"`) {
				t.Errorf("Go field names in the output:\n%s", out)
			}
		})
	}
}

// The CLI's reports and scans take their time from its clock, not the
// machine's: the results' timestamps are the clock's.
func TestReportsTakeTheCLIsClock(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"good.yaml": goodPolicy, "pod.yaml": pod} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, args := range [][]string{
		{"apply", filepath.Join(dir, "good.yaml"), "-r", filepath.Join(dir, "pod.yaml"), "-p"},
		{"scan", dir, "-o", "yaml"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runWith(context.Background(), args, strings.NewReader(""), &stdout, &stderr, clocktesting.NewFakePassiveClock(at)); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		if want := fmt.Sprintf("seconds: %d", at.Unix()); !strings.Contains(stdout.String(), want) {
			t.Errorf("%v: no %q in\n%s", args, want, stdout.String())
		}
	}
}

// -o names where mutated and generated resources go, as kyverno apply -o:
// a .yaml file (emptied first), or a folder with one file per resource
// (NAME-mutated.yaml) and per generating policy (POLICY-generated.yaml).
func TestApplyWritesMutatedAndGeneratedResources(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"mutating.yaml": mutatePolicy, "generating.yaml": generatePolicy, "pods.yaml": pod})
	file := filepath.Join(dir, "out", "all.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("stale: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{file, filepath.Join(dir, "folder")} {
		_, stderr, code := runCLI(t, "apply", filepath.Join(dir, "mutating.yaml"), filepath.Join(dir, "generating.yaml"), "-r", filepath.Join(dir, "pods.yaml"), "-o", target)
		if code != exitOK {
			t.Fatalf("-o %s: exit %d: %s", target, code, stderr)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(data); strings.Contains(s, "stale") || !strings.Contains(s, "team: web") || !strings.Contains(s, "kind: ResourceQuota") {
		t.Fatalf("%s:\n%s", file, s)
	}
	mutated, err := os.ReadFile(filepath.Join(dir, "folder", "web-mutated.yaml"))
	if err != nil || !strings.Contains(string(mutated), "team: web") {
		t.Fatalf("web-mutated.yaml: %v\n%s", err, mutated)
	}
	generated, err := os.ReadFile(filepath.Join(dir, "folder", "add-quota-generated.yaml"))
	if err != nil || !strings.Contains(string(generated), "kind: ResourceQuota") || !strings.Contains(string(generated), "namespace: default") {
		t.Fatalf("add-quota-generated.yaml: %v\n%s", err, generated)
	}
}
