package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/imageverify"
)

// fakeImages answers from a table by image; it checks the conditions of
// an attestation on a statement it makes up.
type fakeImages struct {
	outcomes map[string]imageverify.Outcome
	checks   []imageverify.Check
	resolved []string
}

func (f *fakeImages) Verify(_ context.Context, c imageverify.Check) imageverify.Outcome {
	f.checks = append(f.checks, c)
	if len(c.Entry.Attestations) > 0 && c.Conditions != nil {
		if err := c.Conditions(0, map[string]any{"predicate": map[string]any{"reviewed": true, "reviewer": "qa"}}); err != nil {
			return imageverify.Outcome{Result: "fail", Message: err.Error()}
		}
		return imageverify.Outcome{Result: "pass", Message: "verified image attestations for " + c.Image}
	}
	if o, ok := f.outcomes[c.Image]; ok {
		return o
	}
	if len(c.Entry.Attestations) > 0 {
		statement := map[string]any{"predicateType": c.Entry.Attestations[0].Type, "predicate": map[string]any{"reviewed": true, "reviewer": "qa"}}
		return imageverify.Outcome{Result: "pass", Message: "verified image attestations for " + c.Image, Statements: [][]map[string]any{{statement}}}
	}
	return imageverify.Outcome{Result: "pass", Message: "verified image signatures for " + c.Image}
}

// Resolve answers the digest of an image by digest; a "down" image's
// registry does not answer.
func (f *fakeImages) Resolve(_ context.Context, c imageverify.Check) (string, error) {
	f.resolved = append(f.resolved, c.Image)
	if strings.Contains(c.Image, "down") {
		return "", errors.New("dial tcp: connection refused")
	}
	return "sha256:abc", nil
}

const imagesPolicy = `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: images}
spec:
  rules:
  - name: signed
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["ghcr.io/*", "docker.io/*"]
      skipImageReferences: ["ghcr.io/skip/*"]
      attestors: [{entries: [{keys: {publicKeys: "{{ request.object.metadata.annotations.key }}"}}]}]
  - name: reviewed
    match: {any: [{resources: {kinds: [Pod], names: [reviewed]}}]}
    verifyImages:
    - imageReferences: ["ghcr.io/*"]
      attestations:
      - type: review
        attestors: [{entries: [{keys: {publicKeys: K}}]}]
        conditions:
        - all:
          - {key: "{{ reviewer }}", operator: Equals, value: "{{ request.object.metadata.labels.reviewer }}"}
`

func imagePod(name, labels string, images ...string) string {
	s := "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: shop, labels: {" + labels + "}, annotations: {key: PEM}}\nspec:\n  containers:\n"
	for i, image := range images {
		s += "  - {name: c" + string(rune('a'+i)) + ", image: \"" + image + "\"}\n"
	}
	return s
}

func TestVerifyImages(t *testing.T) {
	p := compile(t, imagesPolicy)
	if len(p.LeftOut) != 0 {
		t.Fatalf("verifyImages rules left out: %v", p.LeftOut)
	}
	cases := []struct {
		name, pod  string
		registry   bool
		rule, want string
		message    string
	}{
		{"signed", imagePod("a", "", "ghcr.io/team/app:1"), true, "signed", "pass", "verified image signatures for ghcr.io/team/app:1"},
		{"docker hub name completed", imagePod("a", "", "nginx"), true, "signed", "pass", "verified image signatures for docker.io/nginx:latest"},
		{"by digest", imagePod("a", "", "ghcr.io/team/app:1@sha256:abc"), true, "signed", "pass", "verified image signatures for ghcr.io/team/app@sha256:abc"},
		{"the worst image decides", imagePod("a", "", "ghcr.io/team/app:1", "ghcr.io/team/bad:1", "ghcr.io/team/down:1"), true, "signed", "fail", "failed to verify image ghcr.io/team/bad:1: no signatures found"},
		{"error before pass", imagePod("a", "", "ghcr.io/team/app:1", "ghcr.io/team/down:1"), true, "signed", "error", "failed to verify image ghcr.io/team/down:1: dial tcp"},
		{"skipped reference", imagePod("a", "", "ghcr.io/skip/app:1"), true, "signed", "skip", "skipping image reference image ghcr.io/skip/app:1, policy images ruleName signed"},
		// Kyverno 1.19 makes no result when no image is selected (issue 54).
		{"not selected", imagePod("a", "", "quay.io/team/app:1"), true, "signed", "", ""},
		{"registry access off", imagePod("a", "", "ghcr.io/team/app:1"), false, "signed", "skip", engine.RegistryOffMessage},
		{"attestation conditions read the predicate and the request", imagePod("reviewed", "reviewer: qa", "ghcr.io/team/app:1"), true, "reviewed", "pass", "verified image attestations for ghcr.io/team/app:1"},
		{"attestation conditions fail", imagePod("reviewed", "reviewer: ops", "ghcr.io/team/app:1"), true, "reviewed", "fail", "attestation checks failed for predicate review"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeImages{outcomes: map[string]imageverify.Outcome{
				"ghcr.io/team/bad:1":  {Result: "fail", Message: "failed to verify image ghcr.io/team/bad:1: no signatures found"},
				"ghcr.io/team/down:1": {Result: "error", Message: "failed to verify image ghcr.io/team/down:1: dial tcp: connection refused"},
			}}
			req := &engine.Request{Object: resource(t, c.pod), Background: true}
			if c.registry {
				req.Images = f
			}
			var got *engine.RuleResult
			for _, r := range p.Evaluate(context.Background(), req) {
				if r.Rule == c.rule {
					r := r
					got = &r
				}
			}
			if got == nil && c.want == "" {
				return
			}
			if got == nil {
				t.Fatalf("no result of rule %s", c.rule)
			}
			if string(got.Result) != c.want || !strings.Contains(got.Message, c.message) {
				t.Errorf("got %s %q, want %s %q", got.Result, got.Message, c.want, c.message)
			}
			for _, ch := range f.checks {
				if ch.Policy != "images" || ch.Identity == "" {
					t.Errorf("check without its policy or identity: %+v", ch)
				}
				if ch.Entry.Attestors != nil && ch.Entry.Attestors[0].Entries[0].Keys.PublicKeys != "PEM" {
					t.Errorf("variables not substituted: %q", ch.Entry.Attestors[0].Entries[0].Keys.PublicKeys)
				}
			}
		})
	}
}

// TestVerifyImagesNotOnDelete: Kyverno verifies no image of a DELETE.
func TestVerifyImagesNotOnDelete(t *testing.T) {
	p := compile(t, imagesPolicy)
	f := &fakeImages{}
	req := &engine.Request{OldObject: resource(t, imagePod("a", "", "ghcr.io/team/app:1")), Operation: engine.OpDelete, Images: f}
	if rs := p.Evaluate(context.Background(), req); len(rs) != 0 || len(f.checks) != 0 {
		t.Fatalf("DELETE: %v, %d checks", rs, len(f.checks))
	}
}

// TestVerifyImagesOnUpdate: on an UPDATE only the images that changed are
// verified, as Kyverno does; nothing changed, nothing is reported.
func TestVerifyImagesOnUpdate(t *testing.T) {
	p := compile(t, imagesPolicy)
	old := resource(t, imagePod("a", "", "ghcr.io/team/app:1", "ghcr.io/team/bad:1"))
	f := &fakeImages{outcomes: map[string]imageverify.Outcome{"ghcr.io/team/bad:1": {Result: "fail", Message: "bad"}}}
	req := &engine.Request{Object: resource(t, imagePod("a", "", "ghcr.io/team/app:2", "ghcr.io/team/bad:1")), OldObject: old, Operation: engine.OpUpdate, Images: f}
	rs := p.Evaluate(context.Background(), req)
	if len(rs) != 1 || rs[0].Result != engine.Pass || len(f.checks) != 1 || f.checks[0].Image != "ghcr.io/team/app:2" {
		t.Fatalf("UPDATE of one image: %+v, checks %+v", rs, f.checks)
	}
	f.checks = nil
	req = &engine.Request{Object: resource(t, imagePod("a", "x: y", "ghcr.io/team/app:1", "ghcr.io/team/bad:1")), OldObject: old, Operation: engine.OpUpdate, Images: f}
	if rs := p.Evaluate(context.Background(), req); len(rs) != 0 || len(f.checks) != 0 {
		t.Fatalf("UPDATE of no image: %+v, %d checks", rs, len(f.checks))
	}
}

// TestVerifyImagesOfATenant: a namespaced Policy borrows none of tally's
// credentials and names no service tally calls (issue 39's rule).
func TestVerifyImagesOfATenant(t *testing.T) {
	doc := func(extra string) string {
		return `
apiVersion: kyverno.io/v1
kind: Policy
metadata: {name: images, namespace: shop}
spec:
  rules:
  - name: signed
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["ghcr.io/*"]
` + extra
	}
	for name, c := range map[string]struct{ extra, want, message string }{
		"plain": {`      attestors: [{entries: [{keys: {publicKeys: K}}]}]
`, "pass", "verified image signatures"},
		"secrets": {`      imageRegistryCredentials: {secrets: [regcred]}
      attestors: [{entries: [{keys: {publicKeys: K}}]}]
`, "error", "imageRegistryCredentials.secrets are not read for a namespaced Policy"},
		"validate inside the entry": {`      attestors: [{entries: [{keys: {publicKeys: K}}]}]
      validate: {deny: {conditions: {any: [{key: a, operator: Equals, value: a}]}}}
`, "error", "validate in a verifyImages entry is not evaluated by tally"},
		"rekor url": {`      attestors: [{entries: [{keys: {publicKeys: K, rekor: {url: "http://10.0.0.1"}}}]}]
`, "error", "rekor.url is not called for a namespaced Policy"},
		"a key in a Secret of another namespace": {`      attestors: [{entries: [{keys: {secret: {name: cosign, namespace: kyverno}}}]}]
`, "error", "keys.secret of another namespace is not read for a namespaced Policy"},
		"a key in a Secret of its own namespace": {`      attestors: [{entries: [{keys: {secret: {name: cosign, namespace: shop}}}]}]
`, "pass", "verified image signatures"},
	} {
		t.Run(name, func(t *testing.T) {
			var p kyvernov1.Policy
			if err := yaml.Unmarshal([]byte(doc(c.extra)), &p); err != nil {
				t.Fatal(err)
			}
			cp, err := engine.CompilePolicy(&p)
			if err != nil {
				t.Fatal(err)
			}
			f := &fakeImages{}
			rs := cp.Evaluate(context.Background(), &engine.Request{Object: resource(t, imagePod("a", "", "ghcr.io/team/app:1")), Images: f})
			if len(rs) != 1 || string(rs[0].Result) != c.want || !strings.Contains(rs[0].Message, c.message) {
				t.Fatalf("got %+v, want %s %q", rs, c.want, c.message)
			}
			for _, ch := range f.checks {
				if !ch.Tenant {
					t.Errorf("a namespaced Policy's check is not marked a tenant's")
				}
			}
		})
	}
}
