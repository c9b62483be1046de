package sigverify_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/tally-dev/tally/engine/imageverify"
	"github.com/tally-dev/tally/engine/imageverify/sigverify"
	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

type fixture struct {
	reg              *sigtest.Registry
	key, other       *sigtest.Key
	signed, unsigned name.Digest
	attested         name.Digest
	// keylessAttested is attested by a key certified by a CA of the
	// tests' (a Fulcio that is not Sigstore's).
	keylessAttested name.Digest
}

func setup(t *testing.T) *fixture {
	t.Helper()
	reg, err := sigtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	f := &fixture{reg: reg}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	f.key, err = sigtest.NewKey()
	must(err)
	f.other, err = sigtest.NewKey()
	must(err)
	f.signed, err = reg.Push("team/app", "signed")
	must(err)
	f.unsigned, err = reg.Push("team/app", "unsigned")
	must(err)
	f.attested, err = reg.Push("team/app", "attested")
	must(err)
	must(f.key.Sign(f.signed, map[string]any{"env": "prod"}))
	must(f.key.Sign(f.attested, nil))
	must(f.key.Attest(f.attested, "https://example.com/review/v1", map[string]any{"reviewed": true}))
	ca, err := sigtest.NewCA()
	must(err)
	certified, err := ca.Issue("ci@example.com", "https://issuer.example.com")
	must(err)
	f.keylessAttested, err = reg.Push("team/app", "keyless-attested")
	must(err)
	must(certified.Attest(f.keylessAttested, "https://example.com/review/v1", map[string]any{"reviewed": true}))
	return f
}

func keys(pem string) imageverify.Attestor {
	return imageverify.Attestor{Keys: &imageverify.StaticKeys{
		PublicKeys: pem,
		Rekor:      &imageverify.Rekor{IgnoreTlog: true},
		CTLog:      &imageverify.CTLog{IgnoreSCT: true},
	}}
}

func entry(sets ...imageverify.AttestorSet) *imageverify.Verification {
	return &imageverify.Verification{ImageReferences: []string{"*"}, Attestors: sets}
}

func TestVerify(t *testing.T) {
	f := setup(t)
	tag := func(d name.Digest, tag string) string { return d.Repository.Name() + ":" + tag }
	two := 1
	cases := []struct {
		name    string
		image   string
		entry   *imageverify.Verification
		result  string
		message string
	}{
		{"signed, by tag", tag(f.signed, "signed"), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}),
			"pass", "verified image signatures for " + tag(f.signed, "signed")},
		{"signed, by digest", f.signed.String(), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}),
			"pass", "verified image signatures for " + f.signed.String()},
		{"unsigned", tag(f.unsigned, "unsigned"), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}),
			"fail", "failed to verify image " + tag(f.unsigned, "unsigned") + ": .attestors[0].entries[0].keys: no signatures found"},
		{"wrong key", tag(f.signed, "signed"), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.other.PublicPEM)}}),
			"fail", "failed to verify image " + tag(f.signed, "signed") + ": .attestors[0].entries[0].keys: no matching signatures"},
		{"one of two keys, count 1", tag(f.signed, "signed"), entry(imageverify.AttestorSet{Count: &two, Entries: []imageverify.Attestor{keys(f.other.PublicPEM), keys(f.key.PublicPEM)}}),
			"pass", "verified image signatures for " + tag(f.signed, "signed")},
		{"one of two keys, count all", tag(f.signed, "signed"), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.other.PublicPEM), keys(f.key.PublicPEM)}}),
			"fail", ".attestors[0].entries[0].keys: no matching signatures"},
		{"annotations match", tag(f.signed, "signed"), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{func() imageverify.Attestor {
			a := keys(f.key.PublicPEM)
			a.Annotations = map[string]string{"env": "prod"}
			return a
		}()}}), "pass", "verified image signatures"},
		{"annotations differ", tag(f.signed, "signed"), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{func() imageverify.Attestor {
			a := keys(f.key.PublicPEM)
			a.Annotations = map[string]string{"env": "dev"}
			return a
		}()}}), "fail", "no matching signatures"},
		{"no such image", f.reg.Host + "/team/none:1", entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}),
			"fail", "failed to verify image " + f.reg.Host + "/team/none:1: "},
		{"attestation holds", tag(f.attested, "attested"), &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
			Type: "https://example.com/review/v1", Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}},
		}}}, "pass", "verified image attestations for " + tag(f.attested, "attested")},
		{"attestation of another type", tag(f.attested, "attested"), &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
			Type: "https://example.com/scan/v1", Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}},
		}}}, "fail", "image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: .attestations[0].attestors[0].entries[0].keys: predicate type https://example.com/scan/v1 not found"},
		// Issue 54: Kyverno verifies an attestation without attestors
		// keyless against the Sigstore trust root; one signed by a key no
		// policy names fails (it passed, its signature unverified).
		{"attestation without attestors, signed by a key nobody trusts", tag(f.attested, "attested"), &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
			Type: "https://example.com/review/v1",
		}}}, "fail", "image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: .attestations[0].attestors[0].entries[0]: attestation checks failed for predicate https://example.com/review/v1: no attestation of that type carries a certificate"},
		{"attestation without attestors, none of the type", tag(f.signed, "signed"), &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
			Type: "https://example.com/review/v1",
		}}}, "fail", "image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: .attestations[0].attestors[0].entries[0]: attestions not found for predicate type https://example.com/review/v1"},
		{"attestation without attestors, unsigned image", tag(f.unsigned, "unsigned"), &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
			Type: "https://example.com/review/v1",
		}}}, "fail", "attestions not found for predicate type"},
		{"attestation without attestors, certified by a CA that is not the trust root's", tag(f.keylessAttested, "keyless-attested"), &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
			Type: "https://example.com/review/v1",
		}}}, "error", "failed to load the Fulcio roots of the Sigstore trust root"},
		{"attestation, wrong key", tag(f.attested, "attested"), &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
			Type: "https://example.com/review/v1", Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{keys(f.other.PublicPEM)}}},
		}}}, "fail", "image attestations verification failed"},
		{"an unknown signature type: an error", tag(f.signed, "signed"), &imageverify.Verification{Type: "Sigstore-bundle", ImageReferences: []string{"*"},
			Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}}},
			"error", "Sigstore-bundle signatures are not verified by tally"},
		{"transparency log required, offline", tag(f.signed, "signed"), entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{{Keys: &imageverify.StaticKeys{
			PublicKeys: f.key.PublicPEM, Rekor: &imageverify.Rekor{URL: "http://127.0.0.1:1"}, CTLog: &imageverify.CTLog{IgnoreSCT: true},
		}}}}), "error", "failed to verify image"},
	}
	// The trust root cannot be read here (no network): an error naming it.
	v := sigverify.New(sigverify.Options{TrustedRoot: func() (root.TrustedMaterial, error) {
		return nil, errors.New("tuf-repo-cdn.sigstore.dev: no network")
	}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := v.Verify(context.Background(), imageverify.Check{Image: c.image, Identity: c.name, Entry: c.entry})
			t.Logf("%s %q", o.Result, o.Message)
			if c.result != "" && o.Result != c.result {
				t.Errorf("result %s, want %s (%s)", o.Result, c.result, o.Message)
			}
			if !strings.Contains(o.Message, c.message) {
				t.Errorf("message %q, want it to hold %q", o.Message, c.message)
			}
			if o.Result == "pass" && o.Digest == "" {
				t.Errorf("a pass without the digest")
			}
		})
	}
}

func TestConditionsOnTheStatement(t *testing.T) {
	f := setup(t)
	v := sigverify.New(sigverify.Options{})
	e := &imageverify.Verification{ImageReferences: []string{"*"}, Attestations: []imageverify.Attestation{{
		Type: "https://example.com/review/v1", Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}},
	}}}
	var seen map[string]any
	o := v.Verify(context.Background(), imageverify.Check{Image: f.attested.String(), Identity: "c", Entry: e,
		Conditions: func(i int, st map[string]any) error {
			seen = st
			return errors.New("condition failed: reviewed is true")
		}})
	if o.Result != "fail" || !strings.Contains(o.Message, "condition failed: reviewed is true") {
		t.Fatalf("got %s %q", o.Result, o.Message)
	}
	if p, _ := seen["predicate"].(map[string]any); p["reviewed"] != true {
		t.Fatalf("conditions saw %v", seen)
	}
}

// TestOneVerificationPerDigest: a thousand checks of one signed image under
// one rule verify it once (R43); another rule entry verifies it again.
func TestOneVerificationPerDigest(t *testing.T) {
	f := setup(t)
	v := sigverify.New(sigverify.Options{})
	e := entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}})
	image := f.signed.Repository.Name() + ":signed"
	for i := 0; i < 1000; i++ {
		if o := v.Verify(context.Background(), imageverify.Check{Image: image, Identity: "p/r/0", Entry: e}); o.Result != "pass" {
			t.Fatalf("check %d: %s %s", i, o.Result, o.Message)
		}
	}
	if n := v.Verifications(); n != 1 {
		t.Fatalf("%d verifications for 1000 checks, want 1", n)
	}
	// The handshake (its ping tries https, then http), the tag's digest,
	// the signature manifest and its blob.
	if n := v.Requests(); n > 5 {
		t.Fatalf("%d registry requests for 1000 checks of one image", n)
	}
	v.Verify(context.Background(), imageverify.Check{Image: image, Identity: "p/r2/0", Entry: e})
	if n := v.Verifications(); n != 2 {
		t.Fatalf("%d verifications after another rule, want 2", n)
	}
}

// TestRegistryDown: an unreachable registry gives error, never fail, and
// is not asked again for a while: the next checks are fast.
func TestRegistryDown(t *testing.T) {
	f := setup(t)
	now := time.Unix(1000, 0)
	v := sigverify.New(sigverify.Options{Now: func() time.Time { return now }})
	e := entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}})
	image := f.signed.Repository.Name() + ":signed"
	f.reg.Stop()
	o := v.Verify(context.Background(), imageverify.Check{Image: image, Identity: "r", Entry: e})
	if o.Result != "error" || !strings.HasPrefix(o.Message, "failed to verify image "+image+": ") {
		t.Fatalf("registry down: %s %q", o.Result, o.Message)
	}
	before := v.Requests()
	for i := 0; i < 100; i++ {
		if o := v.Verify(context.Background(), imageverify.Check{Image: image, Identity: "r", Entry: e}); o.Result != "error" {
			t.Fatalf("check %d: %s", i, o.Result)
		}
	}
	if v.Requests() != before {
		t.Fatalf("a registry known down was asked again: %d requests", v.Requests()-before)
	}
}

// TestCertificatesAndKeyless: a signature carrying a certificate of the
// tests' CA verifies with a certificates attestor (the certificate, its
// chain) and with a keyless attestor (the CA as roots, the identity and
// issuer the certificate names); another identity, issuer or root fails.
func TestCertificatesAndKeyless(t *testing.T) {
	f := setup(t)
	ca, err := sigtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := sigtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := ca.Issue("dev@example.com", "https://issuer.example.com")
	if err != nil {
		t.Fatal(err)
	}
	img, err := f.reg.Push("team/keyless", "1.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Sign(img, nil); err != nil {
		t.Fatal(err)
	}
	image := img.Repository.Name() + ":1.0"
	offline := func(a imageverify.Attestor) imageverify.Attestor {
		switch {
		case a.Certificates != nil:
			a.Certificates.Rekor, a.Certificates.CTLog = &imageverify.Rekor{IgnoreTlog: true}, &imageverify.CTLog{IgnoreSCT: true}
		case a.Keyless != nil:
			a.Keyless.Rekor, a.Keyless.CTLog = &imageverify.Rekor{IgnoreTlog: true}, &imageverify.CTLog{IgnoreSCT: true}
		}
		return a
	}
	keyless := func(roots []byte, subject, issuer string) imageverify.Attestor {
		return offline(imageverify.Attestor{Keyless: &imageverify.Keyless{Roots: string(roots), Subject: subject, Issuer: issuer}})
	}
	cases := []struct {
		name    string
		a       imageverify.Attestor
		result  string
		message string
	}{
		{"certificate", offline(imageverify.Attestor{Certificates: &imageverify.Certificates{Certificate: string(dev.CertPEM), CertificateChain: string(ca.CertPEM)}}),
			"pass", "verified image signatures for " + image},
		{"certificate of another key", offline(imageverify.Attestor{Certificates: &imageverify.Certificates{Certificate: string(func() []byte {
			k, _ := ca.Issue("ops@example.com", "https://issuer.example.com")
			return k.CertPEM
		}())}}), "fail", ".attestors[0].entries[0].certificates: "},
		{"certificate, chain of another CA", offline(imageverify.Attestor{Certificates: &imageverify.Certificates{Certificate: string(dev.CertPEM), CertificateChain: string(otherCA.CertPEM)}}),
			"fail", "certificate chain"},
		{"keyless", keyless(ca.CertPEM, "dev@example.com", "https://issuer.example.com"), "pass", "verified image signatures for " + image},
		{"keyless, another subject", keyless(ca.CertPEM, "ops@example.com", "https://issuer.example.com"), "fail", ".attestors[0].entries[0].keyless: "},
		{"keyless, another issuer", keyless(ca.CertPEM, "dev@example.com", "https://other.example.com"), "fail", ".attestors[0].entries[0].keyless: "},
		{"keyless, other roots", keyless(otherCA.CertPEM, "dev@example.com", "https://issuer.example.com"), "fail", ".attestors[0].entries[0].keyless: "},
	}
	v := sigverify.New(sigverify.Options{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := v.Verify(context.Background(), imageverify.Check{Image: image, Identity: c.name,
				Entry: entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{c.a}})})
			t.Logf("%s %q", o.Result, o.Message)
			if o.Result != c.result || !strings.Contains(o.Message, c.message) {
				t.Errorf("got %s %q, want %s %q", o.Result, o.Message, c.result, c.message)
			}
		})
	}
}

// TestPodPullSecrets: a registry that needs credentials is read with those
// of the resource's imagePullSecrets (from its namespace), tenant or not;
// without them the verification fails, unauthorized.
func TestPodPullSecrets(t *testing.T) {
	f := setup(t)
	f.reg.RequireAuth("team", "s3cret")
	var asked []string
	v := sigverify.New(sigverify.Options{
		PodKeychain: func(_ context.Context, ns string, secrets []string) (authn.Keychain, error) {
			asked = append(asked, ns+"/"+strings.Join(secrets, ","))
			if ns != "team" || len(secrets) != 1 || secrets[0] != "regcred" {
				return nil, errors.New("no such secret")
			}
			return staticKeychain{authn.FromConfig(authn.AuthConfig{Username: "team", Password: "s3cret"})}, nil
		},
	})
	e := entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}})
	check := func(identity, ns string, tenant bool, secrets ...string) imageverify.Outcome {
		return v.Verify(context.Background(), imageverify.Check{Image: f.signed.String(), Policy: "p", Identity: identity, Entry: e, Namespace: ns, PullSecrets: secrets, Tenant: tenant})
	}
	if o := check("none", "team", false); o.Result != "fail" || !strings.Contains(o.Message, "UNAUTHORIZED") {
		t.Errorf("without credentials: %s %q", o.Result, o.Message)
	}
	if o := check("pod", "team", false, "regcred"); o.Result != "pass" {
		t.Errorf("the Pod's pull secret: %s %q", o.Result, o.Message)
	}
	if o := check("tenant", "team", true, "regcred"); o.Result != "pass" {
		t.Errorf("a tenant's policy, the Pod's own pull secret: %s %q", o.Result, o.Message)
	}
	if len(asked) != 2 || asked[0] != "team/regcred" {
		t.Errorf("secrets read: %q", asked)
	}
}

type staticKeychain struct{ a authn.Authenticator }

func (s staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return s.a, nil }

// TestKeyFromSecret: keys.secret reads the public key under cosign.pub of
// the Secret named; a Secret that cannot be read is an error result.
func TestKeyFromSecret(t *testing.T) {
	f := setup(t)
	v := sigverify.New(sigverify.Options{SecretData: func(_ context.Context, ns, name string) (map[string][]byte, error) {
		if ns == "keys" && name == "cosign" {
			return map[string][]byte{"cosign.pub": []byte(f.key.PublicPEM)}, nil
		}
		return nil, errors.New(`secrets "` + name + `" is forbidden`)
	}})
	fromSecret := func(ns, name string) *imageverify.Verification {
		return entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{{Keys: &imageverify.StaticKeys{
			Secret: &imageverify.SecretRef{Namespace: ns, Name: name},
			Rekor:  &imageverify.Rekor{IgnoreTlog: true}, CTLog: &imageverify.CTLog{IgnoreSCT: true},
		}}}})
	}
	if o := v.Verify(context.Background(), imageverify.Check{Image: f.signed.String(), Policy: "p", Identity: "a", Entry: fromSecret("keys", "cosign")}); o.Result != "pass" {
		t.Errorf("key from a Secret: %s %q", o.Result, o.Message)
	}
	if o := v.Verify(context.Background(), imageverify.Check{Image: f.signed.String(), Policy: "p", Identity: "b", Entry: fromSecret("keys", "other")}); o.Result != "error" || !strings.Contains(o.Message, "failed to read secret keys/other") {
		t.Errorf("unreadable Secret: %s %q", o.Result, o.Message)
	}
}

// Issue 54: a cached verification's message names the reference of the
// resource it is reported for: a Pod naming the digest after one naming the
// tag (and the reverse) gets its own reference, and an attestation verified
// after the entry's signatures names the image by its digest, as Kyverno's.
func TestCachedOutcomesNameEachResourcesReference(t *testing.T) {
	f := setup(t)
	v := sigverify.New(sigverify.Options{})
	byTag := f.signed.Repository.Name() + ":signed"
	byDigest := f.signed.Repository.Name() + "@" + f.signed.DigestStr()
	e := entry(imageverify.AttestorSet{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}})
	for _, order := range [][]string{{byTag, byDigest}, {byDigest, byTag}} {
		v := sigverify.New(sigverify.Options{})
		for _, image := range order {
			o := v.Verify(context.Background(), imageverify.Check{Image: image, Identity: "p", Entry: e})
			if want := "verified image signatures for " + image; o.Message != want {
				t.Errorf("%v: %s: %q, want %q", order, image, o.Message, want)
			}
		}
		if n := v.Verifications(); n != 1 {
			t.Errorf("%v: %d verifications, want 1 (one digest)", order, n)
		}
	}
	// An unsigned image's failure, cached, names each reference too.
	unsignedTag := f.unsigned.Repository.Name() + ":unsigned"
	unsignedDigest := f.unsigned.Repository.Name() + "@" + f.unsigned.DigestStr()
	for _, image := range []string{unsignedTag, unsignedDigest} {
		o := v.Verify(context.Background(), imageverify.Check{Image: image, Identity: "p", Entry: e})
		if o.Result != "fail" || !strings.HasPrefix(o.Message, "failed to verify image "+image+": ") {
			t.Errorf("%s: %s %q", image, o.Result, o.Message)
		}
	}
	// Signatures, then an attestation: the attestation's pass names the
	// image by the digest the signatures gave (Kyverno's verifyImage).
	attested := &imageverify.Verification{ImageReferences: []string{"*"},
		Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}},
		Attestations: []imageverify.Attestation{{Type: "https://example.com/review/v1",
			Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{keys(f.key.PublicPEM)}}}}}}
	o := v.Verify(context.Background(), imageverify.Check{Image: f.attested.Repository.Name() + ":attested", Identity: "a", Entry: attested})
	if want := "verified image attestations for " + f.attested.Repository.Name() + "@" + f.attested.DigestStr(); o.Message != want {
		t.Errorf("%q, want %q", o.Message, want)
	}
}
