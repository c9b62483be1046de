package sigverify_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine/imageverify"
	"github.com/tally-dev/tally/engine/imageverify/sigverify"
	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

// TestNotary: an entry of type Notary verifies the image's notary
// signature (an OCI referrer, JWS) against the attestor's certificates:
// signed passes, unsigned and another certificate fail, a registry that
// does not answer is an error; attestations are an error that says so.
func TestNotary(t *testing.T) {
	reg, err := sigtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	key, err := sigtest.NewNotaryKey("tally notary test")
	if err != nil {
		t.Fatal(err)
	}
	other, err := sigtest.NewNotaryKey("another signer")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := reg.Push("team/app", "signed")
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := reg.Push("team/app", "unsigned")
	if err != nil {
		t.Fatal(err)
	}
	if err := key.Sign(signed); err != nil {
		t.Fatal(err)
	}
	notary := func(cert string) *imageverify.Verification {
		return &imageverify.Verification{Type: imageverify.TypeNotary, ImageReferences: []string{"*"},
			Attestors: []imageverify.AttestorSet{{Entries: []imageverify.Attestor{{Certificates: &imageverify.Certificates{Certificate: cert}}}}}}
	}
	withAttestation := notary(key.CertPEM)
	withAttestation.Attestations = []imageverify.Attestation{{Type: "sbom/cyclone-dx"}}
	cases := []struct {
		name, image string
		entry       *imageverify.Verification
		result      string
		message     string
	}{
		{"signed", signed.String(), notary(key.CertPEM), "pass", "verified image signatures for " + signed.String()},
		{"signed, by tag", signed.Repository.Name() + ":signed", notary(key.CertPEM), "pass", "verified image signatures for "},
		{"unsigned", unsigned.String(), notary(key.CertPEM), "fail", "failed to verify image " + unsigned.String() + ": .attestors[0].entries[0]: "},
		{"another certificate", signed.String(), notary(other.CertPEM), "fail", ".attestors[0].entries[0]: "},
		{"not a certificate", signed.String(), notary("not PEM"), "fail", "certificates"},
		{"attestations", signed.String(), withAttestation, "error", "attestations of Notary type are not verified by tally"},
	}
	v := sigverify.New(sigverify.Options{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := v.Verify(context.Background(), imageverify.Check{Image: c.image, Policy: "p", Identity: "p/" + c.name, Entry: c.entry})
			t.Logf("%s %q", o.Result, o.Message)
			if o.Result != c.result || !strings.Contains(o.Message, c.message) {
				t.Errorf("got %s %q, want %s %q", o.Result, o.Message, c.result, c.message)
			}
		})
	}
	// The registry goes down under a verifier that has its handshake
	// already: an error, never a failure (notation's errors do not say why).
	reg.Stop()
	o := v.Verify(context.Background(), imageverify.Check{Image: signed.String(), Policy: "p", Identity: "p/down", Entry: notary(key.CertPEM)})
	t.Logf("registry down: %s %q", o.Result, o.Message)
	if o.Result != "error" {
		t.Errorf("registry down: %s %q, want error", o.Result, o.Message)
	}
}
