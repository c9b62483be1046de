package engine_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/imageverify"
)

func compileIVPOL(t *testing.T, doc string) *engine.Policy {
	t.Helper()
	var p policiesv1.ImageValidatingPolicy
	if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	c, err := engine.CompileImageValidatingPolicy(&p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const ivpol = `
apiVersion: policies.kyverno.io/v1
kind: ImageValidatingPolicy
metadata: {name: signed, annotations: {policies.kyverno.io/category: supply}}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchImageReferences:
  - glob: "ghcr.io/*"
  attestors:
  - name: key
    cosign:
      key: {data: PEM}
      ctlog: {insecureIgnoreTlog: true, insecureIgnoreSCT: true}
  attestations:
  - name: review
    intoto: {type: https://example.com/review/v1}
  validations:
  - expression: "images.containers.map(i, verifyImageSignatures(i, [attestors.key])).all(n, n > 0)"
    message: failed the image signature verification
`

func TestImageValidatingPolicy(t *testing.T) {
	p := compileIVPOL(t, ivpol)
	if p.Source != engine.SourceImageValidatingPolicy {
		t.Fatalf("source %q", p.Source)
	}
	const d = "@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	cases := []struct {
		name     string
		images   []string
		registry bool
		want     string
		rule     string
		message  string
	}{
		{"signed", []string{"ghcr.io/team/app" + d}, true, "pass", "signed", "success"},
		{"unsigned", []string{"ghcr.io/team/bad" + d}, true, "fail", "signed", "failed the image signature verification"},
		{"no digest", []string{"ghcr.io/team/app:1"}, true, "fail", "signed", "image ghcr.io/team/app:1 does not have a digest"},
		{"registry down", []string{"ghcr.io/team/down" + d}, true, "error", "evaluation", "failed to evaluate policy: failed to get imagedata: dial tcp: connection refused"},
		{"image not selected: nothing to verify", []string{"quay.io/team/app:1"}, true, "pass", "signed", "success"},
		{"registry access off", []string{"ghcr.io/team/app" + d}, false, "skip", "signed", engine.RegistryOffMessage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeImages{outcomes: map[string]imageverify.Outcome{
				"ghcr.io/team/bad" + d: {Result: "fail", Message: "failed to verify image: no signatures found"},
			}}
			req := &engine.Request{Object: resource(t, imagePod("a", "", c.images...)), Background: true}
			if c.registry {
				req.Images = f
			}
			rs := p.Evaluate(context.Background(), req)
			if len(rs) != 1 {
				t.Fatalf("results: %+v", rs)
			}
			r := rs[0]
			if string(r.Result) != c.want || r.Rule != c.rule || !strings.Contains(r.Message, c.message) || r.Source != engine.SourceImageValidatingPolicy || r.Policy != "signed" {
				t.Errorf("got %s %s %q (%s/%s), want %s %s %q", r.Result, r.Rule, r.Message, r.Source, r.Policy, c.want, c.rule, c.message)
			}
			for _, ch := range f.checks {
				k := ch.Entry.Attestors[0].Entries[0].Keys
				if k.PublicKeys != "PEM" || !k.Rekor.IgnoreTlog || !k.CTLog.IgnoreSCT || ch.Identity == "" {
					t.Errorf("check: %+v %+v", ch, k)
				}
			}
		})
	}
}

// TestImageValidatingPolicyRequired: an image the validations never verify
// fails (required, on by default); turned off, the policy passes.
func TestImageValidatingPolicyRequired(t *testing.T) {
	doc := strings.Replace(ivpol, `images.containers.map(i, verifyImageSignatures(i, [attestors.key])).all(n, n > 0)`, `true`, 1)
	const img = "ghcr.io/team/app@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	eval := func(doc string) engine.RuleResult {
		req := &engine.Request{Object: resource(t, imagePod("a", "", img)), Background: true, Images: &fakeImages{}}
		return compileIVPOL(t, doc).Evaluate(context.Background(), req)[0]
	}
	if r := eval(doc); r.Result != engine.Fail || r.Message != "image "+img+" is not verified: no policy performed a signature or attestation check on it" {
		t.Errorf("required: %s %q", r.Result, r.Message)
	}
	off := strings.Replace(doc, "  validations:\n", "  validationConfigurations: {required: false}\n  validations:\n", 1)
	if r := eval(off); r.Result != engine.Pass {
		t.Errorf("required off: %s %q", r.Result, r.Message)
	}
}

// TestImageValidatingPolicyAttestation: verifyAttestationSignatures then
// extractPayload reads the verified statement's predicate.
func TestImageValidatingPolicyAttestation(t *testing.T) {
	doc := strings.Replace(ivpol, `images.containers.map(i, verifyImageSignatures(i, [attestors.key])).all(n, n > 0)`,
		`images.containers.all(i, verifyAttestationSignatures(i, attestations.review, [attestors.key]) > 0 && extractPayload(i, attestations.review).predicate.reviewer == 'qa')`, 1)
	const img = "ghcr.io/team/app@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	f := &fakeImages{}
	req := &engine.Request{Object: resource(t, imagePod("a", "", img)), Background: true, Images: f}
	r := compileIVPOL(t, doc).Evaluate(context.Background(), req)[0]
	if r.Result != engine.Pass {
		t.Fatalf("attested: %s %q", r.Result, r.Message)
	}
	if len(f.checks) != 1 || f.checks[0].Entry.Attestations[0].Type != "https://example.com/review/v1" {
		t.Errorf("checks: %+v", f.checks)
	}
}

// TestImageValidatingPolicyAutogen: a Deployment's images are its pod
// template's.
func TestImageValidatingPolicyAutogen(t *testing.T) {
	p := compileIVPOL(t, ivpol)
	dep := resource(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: a, image: "ghcr.io/team/bad@sha256:0000000000000000000000000000000000000000000000000000000000000000"}]
`)
	f := &fakeImages{outcomes: map[string]imageverify.Outcome{
		"ghcr.io/team/bad@sha256:0000000000000000000000000000000000000000000000000000000000000000": {Result: "fail"},
	}}
	rs := p.Evaluate(context.Background(), &engine.Request{Object: dep, Background: true, Images: f})
	if len(rs) != 1 || rs[0].Result != engine.Fail {
		t.Fatalf("deployment: %+v", rs)
	}
}

// TestImageValidatingPolicyNotaryAndPullSecrets: a notary attestor is
// verified as a Notary entry with its certificates; the checks carry the
// Pod's namespace and imagePullSecrets (its registry credentials).
func TestImageValidatingPolicyNotaryAndPullSecrets(t *testing.T) {
	doc := strings.Replace(ivpol, `  attestors:
  - name: key`, `  attestors:
  - name: notary
    notary: {certs: {value: CERTS}, tsaCerts: {value: TSA}}
  - name: key`, 1)
	doc = strings.Replace(doc, "[attestors.key]", "[attestors.notary]", 1)
	const img = "ghcr.io/team/app@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	pod := resource(t, imagePod("a", "", img))
	pod["spec"].(map[string]any)["imagePullSecrets"] = []any{map[string]any{"name": "regcred"}}
	f := &fakeImages{}
	r := compileIVPOL(t, doc).Evaluate(context.Background(), &engine.Request{Object: pod, Background: true, Images: f})[0]
	if r.Result != engine.Pass {
		t.Fatalf("%s %q", r.Result, r.Message)
	}
	if len(f.checks) != 1 {
		t.Fatalf("checks: %+v", f.checks)
	}
	c := f.checks[0]
	a := c.Entry.Attestors[0].Entries[0]
	if c.Entry.Type != imageverify.TypeNotary || a.Certificates == nil || a.Certificates.Certificate != "CERTS" || a.Certificates.CTLog.TSACertChain != "TSA" {
		t.Errorf("notary entry: %+v %+v", c.Entry, a.Certificates)
	}
	if c.Namespace != "shop" || len(c.PullSecrets) != 1 || c.PullSecrets[0] != "regcred" {
		t.Errorf("credentials: namespace %q, pull secrets %q", c.Namespace, c.PullSecrets)
	}
}
