package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

// TestImageExpectationsAreChecked: a kyverno-test.yaml expecting results
// of a verifyImages rule. Without --registry they are skipped (never a
// pass: issue 42's false pass); with it they are checked against a
// registry of the test's own: a signed image passes, an unsigned one
// fails, and a wrong expectation fails the run. tally apply reports the
// same results.
func TestImageExpectationsAreChecked(t *testing.T) {
	reg, err := sigtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	key, err := sigtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := reg.Push("team/app", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Push("team/app", "unsigned"); err != nil {
		t.Fatal(err)
	}
	if err := key.Sign(signed, nil); err != nil {
		t.Fatal(err)
	}
	policy := key.Policy("check-images", reg.Host+"/*")
	pods := `apiVersion: v1
kind: Pod
metadata: {name: good, namespace: default}
spec: {containers: [{name: app, image: "` + reg.Host + `/team/app:v1"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: default}
spec: {containers: [{name: app, image: "` + reg.Host + `/team/app:unsigned"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: elsewhere, namespace: default}
spec: {containers: [{name: app, image: "nginx:1.27"}]}
`
	test := `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: images}
policies: [../policy.yaml]
resources: [../pods.yaml]
results:
- {policy: check-images, rule: signed, resources: [good], kind: Pod, result: pass}
- {policy: check-images, rule: signed, resources: [bad], kind: Pod, result: fail}
- {policy: check-images, rule: signed, resources: [elsewhere], kind: Pod, result: skip}
`
	dir := t.TempDir()
	files := map[string]string{
		"policy.yaml": policy, "pods.yaml": pods,
		"images/kyverno-test.yaml": test,
		"wrong/kyverno-test.yaml":  strings.Replace(test, "resources: [bad], kind: Pod, result: fail", "resources: [bad], kind: Pod, result: pass", 1),
	}
	writeTree(t, dir, files)
	image := reg.Host + "/team/app:unsigned"
	for name, c := range map[string]cliCase{
		"without --registry, skipped, not passed": {
			args: []string{"test", filepath.Join(dir, "images")}, code: 0,
			stdout: []string{"Skip", engine.RegistryOffMessage, "1 passed, 0 failed, 2 skipped"},
		},
		"with --registry, checked": {
			args: []string{"test", filepath.Join(dir, "images"), "--registry"}, code: 0,
			stdout: []string{"3 passed, 0 failed, 0 skipped"},
		},
		"with --registry, a wrong expectation fails": {
			args: []string{"test", filepath.Join(dir, "wrong"), "--registry", "--detailed-results"}, code: 1,
			stdout: []string{"2 passed, 1 failed, 0 skipped", "failed to verify image " + image + ": .attestors[0].entries[0].keys: no signatures found"},
		},
		"apply --registry reports the failure": {
			args: []string{"apply", filepath.Join(dir, "policy.yaml"), "--resource", filepath.Join(dir, "pods.yaml"), "--registry"}, code: 1,
			stdout: []string{"failed to verify image " + image},
		},
	} {
		t.Run(name, func(t *testing.T) { c.check(t) })
	}
}

// TestImageValidatingPolicyExpectations: an ImageValidatingPolicy's
// expectations (isImageValidatingPolicy) against a registry of the test's
// own: a signed image by digest passes, an unsigned one fails, a tag fails
// for its missing digest, an image the policy does not select passes;
// without --registry nothing that needs the registry passes.
func TestImageValidatingPolicyExpectations(t *testing.T) {
	reg, err := sigtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	key, err := sigtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := reg.Push("team/app", "v1")
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := reg.Push("team/app", "unsigned")
	if err != nil {
		t.Fatal(err)
	}
	if err := key.Sign(signed, nil); err != nil {
		t.Fatal(err)
	}
	pod := func(name, image string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: default}\nspec: {containers: [{name: app, image: \"" + image + "\"}]}\n---\n"
	}
	pods := pod("good", signed.String()) + pod("bad", unsigned.String()) + pod("tag", reg.Host+"/team/app:v1") + pod("elsewhere", "nginx:1.27")
	test := `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: ivpol}
policies: [../policy.yaml]
resources: [../pods.yaml]
results:
- {policy: check-images, isImageValidatingPolicy: true, resources: [good], kind: Pod, result: pass}
- {policy: check-images, isImageValidatingPolicy: true, resources: [bad], kind: Pod, result: fail}
- {policy: check-images, isImageValidatingPolicy: true, resources: [tag], kind: Pod, result: fail}
- {policy: check-images, isImageValidatingPolicy: true, resources: [elsewhere], kind: Pod, result: pass}
`
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"policy.yaml": key.ImageValidatingPolicy("check-images", reg.Host+"/*"), "pods.yaml": pods,
		"ivpol/kyverno-test.yaml": test,
		"wrong/kyverno-test.yaml": strings.Replace(test, "resources: [bad], kind: Pod, result: fail", "resources: [bad], kind: Pod, result: pass", 1),
	})
	for name, c := range map[string]cliCase{
		"without --registry, skipped, not passed": {
			args: []string{"test", filepath.Join(dir, "ivpol")}, code: 0,
			stdout: []string{engine.RegistryOffMessage, "2 passed, 0 failed, 2 skipped"},
		},
		"with --registry, checked": {
			args: []string{"test", filepath.Join(dir, "ivpol"), "--registry"}, code: 0,
			stdout: []string{"4 passed, 0 failed, 0 skipped"},
		},
		"with --registry, a wrong expectation fails": {
			args: []string{"test", filepath.Join(dir, "wrong"), "--registry", "--detailed-results"}, code: 1,
			stdout: []string{"3 passed, 1 failed, 0 skipped", "failed the image signature verification"},
		},
		"apply --registry reports the failures": {
			args: []string{"apply", filepath.Join(dir, "policy.yaml"), "--resource", filepath.Join(dir, "pods.yaml"), "--registry"}, code: 1,
			stdout: []string{"failed the image signature verification", "image " + reg.Host + "/team/app:v1 does not have a digest"},
		},
	} {
		t.Run(name, func(t *testing.T) { c.check(t) })
	}
}
