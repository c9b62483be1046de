package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

// TestImageExpectationsAreChecked: a kyverno-test.yaml expecting results
// of a verifyImages rule, checked against a registry of the test's own,
// with or without --registry, as Kyverno's CLI checks them (issue 54): a
// signed image passes, an unsigned one fails, and a wrong expectation
// fails the run. tally apply reports the same results and exits 1. With
// --registry=false nothing is checked, and nothing counts as passed (issue
// 42's false pass): exit 1.
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
		"without flags, checked": {
			args: []string{"test", filepath.Join(dir, "images")}, code: 0,
			stdout: []string{"3 passed, 0 failed, 0 skipped"},
		},
		"with --registry=false, not evaluated, not passed, exit 1": {
			args: []string{"test", filepath.Join(dir, "images"), "--registry=false"}, code: 1,
			stdout: []string{engine.RegistryOffMessage, "1 passed, 0 failed, 0 skipped, 2 unsupported"},
		},
		"with --registry, checked": {
			args: []string{"test", filepath.Join(dir, "images"), "--registry"}, code: 0,
			stdout: []string{"3 passed, 0 failed, 0 skipped"},
		},
		"apply without flags reports the failure, exit 1": {
			args: []string{"apply", filepath.Join(dir, "policy.yaml"), "--resource", filepath.Join(dir, "pods.yaml")}, code: 1,
			stdout: []string{"failed to verify image " + image},
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
		"with --registry=false, not evaluated, not passed, exit 1": {
			args: []string{"test", filepath.Join(dir, "ivpol"), "--registry=false"}, code: 1,
			stdout: []string{engine.RegistryOffMessage, "2 passed, 0 failed, 0 skipped, 2 unsupported"},
		},
		"without flags, checked": {
			args: []string{"test", filepath.Join(dir, "ivpol")}, code: 0,
			stdout: []string{"4 passed, 0 failed, 0 skipped"},
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

// Issue 54 in the CLI, against a registry of the test's own:
//   - an attestation entry without attestors, whose only attestation is
//     signed by a key no policy names, fails (Kyverno verifies it keyless);
//   - getImageData answers from the registry;
//   - policies Kyverno refuses are refused (an ImageValidatingPolicy
//     without attestors or validations, a keyless attestor with
//     ignoreTlog and no rekor.url);
//   - tally scan reports an ImageValidatingPolicy;
//   - a Pod naming the digest is reported with the digest after one naming
//     the tag, and the reverse.
func TestImageChecksAsKyvernosCLI(t *testing.T) {
	reg, err := sigtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	key, err := sigtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	img, err := sigtest.FixtureImage("issue-54")
	if err != nil {
		t.Fatal(err)
	}
	attested, err := reg.PushImage("team/app", "v1", img)
	if err != nil {
		t.Fatal(err)
	}
	if err := key.Sign(attested, nil); err != nil {
		t.Fatal(err)
	}
	if err := key.Attest(attested, "https://example.com/review/v1", map[string]any{"reviewed": true}); err != nil {
		t.Fatal(err)
	}
	byTag, byDigest := reg.Host+"/team/app:v1", attested.String()
	pod := func(name, image string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: default}\nspec: {containers: [{name: app, image: \"" + image + "\"}]}\n---\n"
	}
	unattestedPolicy := `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: reviewed}
spec:
  validationFailureAction: Audit
  rules:
  - name: reviewed
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["` + reg.Host + `/*"]
      attestations:
      - type: https://example.com/review/v1
        conditions:
        - all: [{key: "{{ reviewed }}", operator: Equals, value: true}]
`
	imageData := `apiVersion: policies.kyverno.io/v1
kind: ImageValidatingPolicy
metadata: {name: image-data}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchImageReferences: [{glob: "` + reg.Host + `/*"}]
  validationConfigurations: {verifyDigest: false, required: false}
  attestors: []
  validations:
  - expression: "images.containers.all(i, getImageData(i).config.architecture == 'amd64')"
    message: not amd64
`
	noAttestors := `apiVersion: policies.kyverno.io/v1
kind: ImageValidatingPolicy
metadata: {name: no-attestors}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations: [{expression: "true"}]
`
	keylessNoURL := `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: keyless-no-url}
spec:
  rules:
  - name: signed
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["*"]
      attestors:
      - entries:
        - keyless: {issuer: "https://issuer.example.com", subject: "ci@example.com", rekor: {ignoreTlog: true}}
`
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"unattested.yaml": unattestedPolicy, "image-data.yaml": imageData,
		"no-attestors.yaml": noAttestors, "keyless.yaml": keylessNoURL,
		"pods.yaml":       pod("by-tag", byTag) + pod("by-digest", byDigest),
		"reverse.yaml":    pod("by-digest", byDigest) + pod("by-tag", byTag),
		"signed.yaml":     key.Policy("signed", reg.Host+"/*"),
		"scan/ivpol.yaml": key.ImageValidatingPolicy("check-images", reg.Host+"/*"),
		"scan/pods.yaml":  pod("by-digest", byDigest),
	})
	for name, c := range map[string]cliCase{
		"an attestation without attestors, signed by an untrusted key, fails": {
			args: []string{"apply", filepath.Join(dir, "unattested.yaml"), "-r", filepath.Join(dir, "pods.yaml")}, code: 1,
			stdout: []string{"fail", "no attestation of that type carries a certificate"},
		},
		"getImageData answers": {
			args: []string{"apply", filepath.Join(dir, "image-data.yaml"), "-r", filepath.Join(dir, "pods.yaml")}, code: 0,
			stdout: []string{"pass: 2, fail: 0"},
		},
		"an ImageValidatingPolicy without attestors is refused": {
			args: []string{"apply", filepath.Join(dir, "no-attestors.yaml"), "-r", filepath.Join(dir, "pods.yaml")}, code: 1,
			stderr: []string{"no-attestors", "spec.attestors", "Required"},
		},
		"a keyless attestor with ignoreTlog and no rekor.url is refused": {
			args: []string{"apply", filepath.Join(dir, "keyless.yaml"), "-r", filepath.Join(dir, "pods.yaml")}, code: 1,
			stderr: []string{"spec.rules[0].verifyImages[0].attestors[0].entries[0].keyless", "An URL is required"},
		},
		"tally scan reports an ImageValidatingPolicy": {
			args: []string{"scan", filepath.Join(dir, "scan")}, code: 0,
			stdout: []string{"Pod/default/by-digest", "1 report"},
		},
		"the tag, then the digest: each named as written": {
			args: []string{"apply", filepath.Join(dir, "signed.yaml"), "-r", filepath.Join(dir, "pods.yaml"), "--detailed-results"}, code: 0,
			stdout: []string{"verified image signatures for " + byTag, "verified image signatures for " + byDigest},
		},
		"the digest, then the tag: each named as written": {
			args: []string{"apply", filepath.Join(dir, "signed.yaml"), "-r", filepath.Join(dir, "reverse.yaml"), "--detailed-results"}, code: 0,
			stdout: []string{"verified image signatures for " + byTag, "verified image signatures for " + byDigest},
		},
	} {
		t.Run(name, func(t *testing.T) { c.check(t) })
	}
}
