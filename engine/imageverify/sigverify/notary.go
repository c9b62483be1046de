package sigverify

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	_ "github.com/notaryproject/notation-core-go/signature/cose" // COSE envelopes
	_ "github.com/notaryproject/notation-core-go/signature/jws"  // JWS envelopes
	"github.com/notaryproject/notation-go"
	notationregistry "github.com/notaryproject/notation-go/registry"
	notationverifier "github.com/notaryproject/notation-go/verifier"
	"github.com/notaryproject/notation-go/verifier/trustpolicy"
	"github.com/notaryproject/notation-go/verifier/truststore"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	orasremote "oras.land/oras-go/v2/registry/remote"

	"github.com/tally-dev/tally/engine/imageverify"
)

// trustStoreName is the one named store of each notary verification: the
// attestor's certificates.
const trustStoreName = "tally"

// verifyNotary verifies an entry of type Notary: each attestor set's
// entries are certificates (cert and certChain: the trust store's CA
// certificates; ctlog.tsaCertChain its timestamping authorities), and the
// image must carry a notary signature (an OCI referrer) that one of them
// verifies, under notation's strict verification level.
func (v *Verifier) verifyNotary(ctx context.Context, c imageverify.Check, ref name.Digest, registry string) imageverify.Outcome {
	e := c.Entry
	if len(e.Attestations) > 0 {
		return imageverify.Outcome{Result: resultError, Message: fmt.Sprintf("failed to verify image %s: attestations of Notary type are not verified by tally (docs/known-differences.md)", c.Image)}
	}
	if len(e.Attestors) == 0 {
		return imageverify.Outcome{Result: resultFail, Message: fmt.Sprintf("failed to verify image %s: a Notary entry needs attestors", c.Image)}
	}
	for i, set := range e.Attestors {
		path := fmt.Sprintf(".attestors[%d]", i)
		required := set.RequiredCount()
		verified := 0
		var errs []error
		for j, a := range set.Entries {
			err := v.verifyNotaryEntry(ctx, e, a, ref)
			if err == nil {
				verified++
				if verified >= required {
					break
				}
				continue
			}
			errs = append(errs, fmt.Errorf("%s.entries[%d]: %w", path, j, err))
		}
		if verified < required {
			err := errors.Join(errs...)
			return v.failed(c.Image, v.noteDown(registry, err))
		}
	}
	return imageverify.Outcome{Result: resultPass, Message: "verified image signatures for " + c.Image}
}

// verifyNotaryEntry verifies the image's notary signatures with one
// attestor's certificates.
func (v *Verifier) verifyNotaryEntry(ctx context.Context, e *imageverify.Verification, a imageverify.Attestor, ref name.Digest) error {
	if a.Certificates == nil || (a.Certificates.Certificate == "" && a.Certificates.CertificateChain == "") {
		return errors.New("a Notary attestor needs certificates (cert, certChain)")
	}
	store := memoryTrustStore{}
	for _, pemData := range []string{a.Certificates.Certificate, a.Certificates.CertificateChain} {
		if pemData == "" {
			continue
		}
		certs, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(pemData))
		if err != nil {
			return fmt.Errorf("certificates: %w", err)
		}
		store[truststore.TypeCA] = append(store[truststore.TypeCA], certs...)
	}
	trustStores := []string{string(truststore.TypeCA) + ":" + trustStoreName}
	if ct := a.Certificates.CTLog; ct != nil && ct.TSACertChain != "" {
		certs, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(ct.TSACertChain))
		if err != nil {
			return fmt.Errorf("ctlog.tsaCertChain: %w", err)
		}
		store[truststore.TypeTSA] = certs
		trustStores = append(trustStores, string(truststore.TypeTSA)+":"+trustStoreName)
	}
	policy := &trustpolicy.Document{
		Version: "1.0",
		TrustPolicies: []trustpolicy.TrustPolicy{{
			Name:                  "tally",
			RegistryScopes:        []string{"*"},
			SignatureVerification: trustpolicy.SignatureVerification{VerificationLevel: trustpolicy.LevelStrict.Name},
			TrustStores:           trustStores,
			TrustedIdentities:     []string{"*"},
		}},
	}
	verifier, err := notationverifier.New(policy, store, nil)
	if err != nil {
		return fmt.Errorf("notation verifier: %w", err)
	}
	target, _, err := signatureRepository(e, a, ref)
	if err != nil {
		return err
	}
	rt, err := v.transportFor(ctx, target)
	if err != nil {
		return err
	}
	repo, err := orasremote.NewRepository(target.Name())
	if err != nil {
		return err
	}
	repo.PlainHTTP = target.Registry.Scheme() == "http"
	// notation's errors do not keep the registry's: the transport notes
	// a request that got no answer, or a server error, so that an
	// unreachable registry is an error result, never a failure.
	rec := &recordingTransport{next: rt}
	repo.Client = &http.Client{Transport: rec}
	artifact := target.Digest(ref.DigestStr()).String()
	_, _, err = notation.Verify(ctx, verifier, notationregistry.NewRepository(repo), notation.VerifyOptions{
		ArtifactReference:    artifact,
		MaxSignatureAttempts: 50,
	})
	if err != nil {
		if infraErr := rec.failure(); infraErr != nil {
			return infraErr
		}
	}
	return err
}

// recordingTransport remembers the first request that got no answer, or a
// server error or rate limit.
type recordingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	err  error
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	var noted error
	switch {
	case err != nil:
		noted = err
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		noted = infra(fmt.Errorf("%s %s: %s", req.Method, req.URL.Redacted(), resp.Status))
	}
	if noted != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = noted
		}
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recordingTransport) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil && Unreachable(r.err) {
		return r.err
	}
	return nil
}

// memoryTrustStore is a trust store of certificates by type, all in the
// one named store.
type memoryTrustStore map[truststore.Type][]*x509.Certificate

func (m memoryTrustStore) GetCertificates(_ context.Context, storeType truststore.Type, namedStore string) ([]*x509.Certificate, error) {
	if namedStore != trustStoreName || len(m[storeType]) == 0 {
		return nil, fmt.Errorf("no %s certificates in trust store %s", storeType, namedStore)
	}
	return m[storeType], nil
}
