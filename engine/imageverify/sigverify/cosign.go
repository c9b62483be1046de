package sigverify

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/tally-dev/tally/engine/imageverify"
)

// verify runs the entry's attestors, then its attestations, on the image
// at its digest; the messages are Kyverno's.
func (v *Verifier) verify(ctx context.Context, c imageverify.Check, ref name.Digest, registry string) imageverify.Outcome {
	e := c.Entry
	switch e.Type {
	case "", imageverify.TypeCosign:
	case imageverify.TypeNotary:
		return v.verifyNotary(ctx, c, ref, registry)
	default:
		return imageverify.Outcome{Result: resultError, Message: fmt.Sprintf("failed to verify image %s: %s signatures are not verified by tally (docs/known-differences.md)", c.Image, e.Type)}
	}
	if len(e.Attestors) > 0 {
		for i, set := range e.Attestors {
			if err := v.verifySet(ctx, e, set, ref, fmt.Sprintf(".attestors[%d]", i), nil); err != nil {
				return v.failed(c.Image, v.noteDown(registry, err))
			}
		}
		if len(e.Attestations) == 0 {
			return imageverify.Outcome{Result: resultPass, Message: "verified image signatures for " + c.Image}
		}
	}
	var statements [][]map[string]any
	for i, att := range e.Attestations {
		o, done, checked := v.verifyAttestation(ctx, c, i, att, ref, registry)
		if done {
			return o
		}
		statements = append(statements, checked)
	}
	// Kyverno names the image by its digest once the entry's signatures
	// gave it (verifyImage: imageInfo.Digest = the signatures' digest).
	image := c.Image
	if len(e.Attestors) > 0 {
		image = attestedImage(c.Image, ref)
	}
	o := imageverify.Outcome{Result: resultPass, Message: "verified image attestations for " + image}
	if c.Statements {
		o.Statements = statements
	}
	return o
}

// sigstoreTUF is where the public Sigstore trust root is read from (cosign's
// default TUF mirror), as Kyverno reads it.
const sigstoreTUF = "https://tuf-repo-cdn.sigstore.dev"

// attestedImage is the image named as Kyverno names it once the entry's
// signatures verified: at its digest (registry/path@digest).
func attestedImage(image string, ref name.Digest) string {
	if image == imagePlaceholder {
		return imageDigestPlaceholder
	}
	return WithDigest(image, ref.DigestStr())
}

// verifySet verifies the entries of a set until its count is reached; the
// errors of the entries that did not verify are joined. With statements
// set, the entries verify attestations of a predicate type instead of
// signatures, and statements receives each verified entry's statements.
func (v *Verifier) verifySet(ctx context.Context, e *imageverify.Verification, set imageverify.AttestorSet, ref name.Digest, path string, att *attestationCheck) error {
	set = set.ExpandKeys()
	required := set.RequiredCount()
	verified := 0
	var errs []error
	for i, a := range set.Entries {
		entryPath := fmt.Sprintf("%s.entries[%d]", path, i)
		var err error
		if len(a.Attestor) > 0 {
			var nested imageverify.AttestorSet
			if uerr := json.Unmarshal(a.Attestor, &nested); uerr != nil {
				err = fmt.Errorf("failed to unmarshal nested attestor %s: %w", entryPath, uerr)
			} else {
				err = v.verifySet(ctx, e, nested, ref, entryPath+".attestor", att)
			}
		} else {
			var sub string
			sub, err = v.verifyEntry(ctx, e, a, ref, att)
			if err != nil {
				err = fmt.Errorf("%s%s: %w", entryPath, sub, err)
			}
		}
		if err == nil {
			verified++
			if verified >= required {
				return nil
			}
			continue
		}
		errs = append(errs, err)
	}
	if verified >= required {
		return nil
	}
	if len(errs) == 0 {
		return fmt.Errorf("%s: %d of %d attestors verified", path, verified, required)
	}
	return joinErrors(errs)
}

// verifyEntry verifies one attestor: the signature, or with att the
// attestations of att's predicate type, whose statements att checks.
func (v *Verifier) verifyEntry(ctx context.Context, e *imageverify.Verification, a imageverify.Attestor, ref name.Digest, att *attestationCheck) (string, error) {
	co, sub, err := v.checkOpts(ctx, e, a, ref)
	if err != nil {
		return sub, err
	}
	if att == nil {
		_, _, err := cosign.VerifyImageSignatures(ctx, ref, co)
		return sub, err
	}
	co.ClaimVerifier = cosign.IntotoSubjectClaimVerifier
	sigs, _, err := cosign.VerifyImageAttestations(ctx, ref, co)
	if err != nil {
		return sub, err
	}
	payloads := make([]signatureLike, len(sigs))
	for i, s := range sigs {
		payloads[i] = s
	}
	return sub, att.check(payloads)
}

// checkOpts are cosign's options for one attestor: its key, certificate
// or keyless identity, its transparency log and SCT switches, its
// annotations, and where the signatures are.
func (v *Verifier) checkOpts(ctx context.Context, e *imageverify.Verification, a imageverify.Attestor, ref name.Digest) (*cosign.CheckOpts, string, error) {
	var remoteOpts []ociremote.Option
	target, moved, err := signatureRepository(e, a, ref)
	if err != nil {
		return nil, "", err
	}
	if moved {
		remoteOpts = append(remoteOpts, ociremote.WithTargetRepository(target))
	}
	ropts, err := v.remoteOptions(ctx, target)
	if err != nil {
		return nil, "", err
	}
	remoteOpts = append(remoteOpts, ociremote.WithRemoteOptions(ropts...))
	co := &cosign.CheckOpts{RegistryClientOpts: remoteOpts, ClaimVerifier: cosign.SimpleClaimVerifier}
	if len(a.Annotations) > 0 {
		co.Annotations = map[string]any{}
		for k, val := range a.Annotations {
			co.Annotations[k] = val
		}
	}
	var rekor *imageverify.Rekor
	var ctlog *imageverify.CTLog
	var sub string
	switch {
	case a.Keys != nil:
		sub = ".keys"
		k := a.Keys
		rekor, ctlog = k.Rekor, k.CTLog
		if k.KMS != "" {
			return nil, sub, infra(errors.New("keys from a KMS are not read by tally (docs/known-differences.md)"))
		}
		keyPEM := k.PublicKeys
		if k.Secret != nil {
			var err error
			if keyPEM, err = v.secretKey(ctx, k.Secret); err != nil {
				return nil, sub, err
			}
		}
		pub, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(keyPEM))
		if err != nil {
			return nil, sub, fmt.Errorf("failed to load public key: %w", err)
		}
		hash, err := hashOf(k.SignatureAlgorithm)
		if err != nil {
			return nil, sub, err
		}
		if co.SigVerifier, err = signature.LoadVerifier(pub, hash); err != nil {
			return nil, sub, fmt.Errorf("failed to load public key: %w", err)
		}
	case a.Certificates != nil:
		sub = ".certificates"
		cs := a.Certificates
		rekor, ctlog = cs.Rekor, cs.CTLog
		certs, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(cs.Certificate))
		if err != nil || len(certs) == 0 {
			return nil, sub, fmt.Errorf("failed to load certificate: %v", err)
		}
		if co.SigVerifier, err = signature.LoadVerifier(certs[0].PublicKey, crypto.SHA256); err != nil {
			return nil, sub, fmt.Errorf("failed to load certificate: %w", err)
		}
		if cs.CertificateChain != "" {
			chain, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(cs.CertificateChain))
			if err != nil {
				return nil, sub, fmt.Errorf("failed to load certificate chain: %w", err)
			}
			if err := verifyChain(certs[0], chain); err != nil {
				return nil, sub, err
			}
		}
	case a.Keyless != nil:
		sub = ".keyless"
		kl := a.Keyless
		rekor, ctlog = kl.Rekor, kl.CTLog
		co.Identities = []cosign.Identity{{Issuer: kl.Issuer, Subject: kl.Subject, IssuerRegExp: kl.IssuerRegExp, SubjectRegExp: kl.SubjectRegExp}}
		if kl.Roots != "" {
			roots, err := cryptoutils.UnmarshalCertificatesFromPEM([]byte(kl.Roots))
			if err != nil {
				return nil, sub, fmt.Errorf("failed to load roots: %w", err)
			}
			co.RootCerts = x509.NewCertPool()
			for _, r := range roots {
				co.RootCerts.AddCert(r)
			}
		} else {
			tm, err := v.opts.TrustedRoot() // the public Fulcio's, from sigstore's TUF root, by default
			if err != nil {
				return nil, sub, infra(fmt.Errorf("failed to load the Fulcio roots of the Sigstore trust root (the public one's TUF repository is %s): %w", sigstoreTUF, err))
			}
			co.TrustedMaterial = tm
		}
	default:
		return nil, "", errors.New("the attestor has neither keys, certificates, keyless nor a nested attestor")
	}
	co.IgnoreTlog = rekor != nil && rekor.IgnoreTlog
	co.IgnoreSCT = ctlog != nil && ctlog.IgnoreSCT
	if !co.IgnoreTlog {
		if err := rekorFor(ctx, co, rekor); err != nil {
			return nil, sub, err
		}
	}
	if !co.IgnoreSCT && a.Keyless != nil {
		pubs, err := cosign.GetCTLogPubs(ctx)
		if err != nil {
			return nil, sub, infra(fmt.Errorf("failed to load CT log public keys: %w", err))
		}
		co.CTLogPubKeys = pubs
	}
	return co, sub, nil
}

func hashOf(alg string) (crypto.Hash, error) {
	switch alg {
	case "", "sha256":
		return crypto.SHA256, nil
	case "sha224":
		return crypto.SHA224, nil
	case "sha384":
		return crypto.SHA384, nil
	case "sha512":
		return crypto.SHA512, nil
	}
	return 0, fmt.Errorf("signature algorithm %q is not supported", alg)
}

func verifyChain(cert *x509.Certificate, chain []*x509.Certificate) error {
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(chain[len(chain)-1])
	for _, c := range chain[:len(chain)-1] {
		inter.AddCert(c)
	}
	_, err := cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: cert.NotBefore})
	if err != nil {
		return fmt.Errorf("certificate chain: %w", err)
	}
	return nil
}

// attestationCheck checks the statements of one attestation entry: their
// predicate type, and the entry's conditions on each predicate.
type attestationCheck struct {
	predicateType string
	conditions    func(statement map[string]any) error
	// statements are those of the predicate type that were checked.
	statements []map[string]any
}

func (a *attestationCheck) check(sigs []signatureLike) error {
	found := false
	for _, s := range sigs {
		payload, err := s.Payload()
		if err != nil {
			return fmt.Errorf("failed to read the attestation: %w", err)
		}
		statement, err := decodeStatement(payload)
		if err != nil {
			return err
		}
		if t, _ := statement["predicateType"].(string); t != a.predicateType {
			continue
		}
		found = true
		if a.conditions != nil {
			if err := a.conditions(statement); err != nil {
				return err
			}
		}
		if len(a.statements) == 0 {
			a.statements = append(a.statements, statement) // the first is the payload
		}
	}
	if !found {
		return fmt.Errorf("predicate type %s not found", a.predicateType)
	}
	return nil
}

// signatureLike is what an attestation gives: its DSSE envelope.
type signatureLike interface{ Payload() ([]byte, error) }

// decodeStatement reads the in-toto statement of a DSSE envelope.
func decodeStatement(envelope []byte) (map[string]any, error) {
	var env struct {
		Payload string `json:"payload"`
	}
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, fmt.Errorf("failed to decode the attestation envelope: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return nil, fmt.Errorf("failed to decode the attestation payload: %w", err)
	}
	var statement map[string]any
	if err := json.Unmarshal(raw, &statement); err != nil {
		return nil, fmt.Errorf("failed to decode the in-toto statement: %w", err)
	}
	return statement, nil
}

// verifyAttestation checks the attestation i of the entry with each of its
// attestor sets (done with an outcome when one does not verify); statements
// are the in-toto statements of its type that were checked.
func (v *Verifier) verifyAttestation(ctx context.Context, c imageverify.Check, i int, att imageverify.Attestation, ref name.Digest, registry string) (o imageverify.Outcome, done bool, statements []map[string]any) {
	path := fmt.Sprintf(".attestations[%d]", i)
	typ := att.Type
	if typ == "" {
		typ = att.PredicateType
	}
	if typ == "" {
		return imageverify.Outcome{Result: resultFail, Message: path + ": missing type"}, true, nil
	}
	ac := &attestationCheck{predicateType: typ}
	if c.Conditions != nil {
		ac.conditions = func(statement map[string]any) error { return c.Conditions(i, statement) }
	}
	if len(att.Attestors) == 0 {
		// No attestor: Kyverno verifies the attestation with cosign's
		// defaults (an empty attestor: keyless, any identity, against the
		// public Sigstore roots and Rekor, SCTs not checked): a
		// key-signed or unsigned attestation fails (issue 54).
		if err := v.verifyUnattested(ctx, c.Entry, ref, ac); err != nil {
			err = v.noteDown(registry, err)
			if Unreachable(err) {
				return v.failed(c.Image, err), true, nil
			}
			return imageverify.Outcome{Result: resultFail, Message: fmt.Sprintf("image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: %s.attestors[0].entries[0]: %s", path, err)}, true, nil
		}
		return imageverify.Outcome{}, false, ac.statements
	}
	for j, set := range att.Attestors {
		if err := v.verifySet(ctx, c.Entry, set, ref, fmt.Sprintf("%s.attestors[%d]", path, j), ac); err != nil {
			err = v.noteDown(registry, err)
			if Unreachable(err) {
				return v.failed(c.Image, err), true, nil
			}
			required := set.ExpandKeys().RequiredCount()
			return imageverify.Outcome{Result: resultFail, Message: fmt.Sprintf("image attestations verification failed, verifiedCount: 0, requiredCount: %d, error: %s", required, err)}, true, nil
		}
	}
	return imageverify.Outcome{}, false, ac.statements
}

// verifyUnattested verifies the attestations of ac's predicate type of an
// entry without attestors, as Kyverno does: keyless, any identity, against
// the Sigstore trust root (Options.KeylessRoot, the public one by default)
// and its transparency log. An attestation of the type that carries no
// certificate (key-signed) cannot verify keyless: that fails without the
// trust root, which is read only when a certificate is there to check (an
// unreadable root is an error naming it, never a pass or a fail).
func (v *Verifier) verifyUnattested(ctx context.Context, e *imageverify.Verification, ref name.Digest, ac *attestationCheck) error {
	opts, err := v.remoteOptions(ctx, ref.Context())
	if err != nil {
		return err
	}
	img, err := ociremote.SignedImage(ref, ociremote.WithRemoteOptions(opts...))
	if err != nil {
		return err
	}
	atts, err := img.Attestations()
	if err != nil {
		return err
	}
	sigs, err := atts.Get()
	if err != nil {
		return err
	}
	found, certified := false, false
	for _, sig := range sigs {
		payload, err := sig.Payload()
		if err != nil {
			continue
		}
		statement, err := decodeStatement(payload)
		if err != nil {
			continue
		}
		if t, _ := statement["predicateType"].(string); t != ac.predicateType {
			continue
		}
		found = true
		if cert, err := sig.Cert(); err == nil && cert != nil {
			certified = true
		}
	}
	switch {
	case !found:
		return fmt.Errorf("attestions not found for predicate type %s", ac.predicateType)
	case !certified:
		return fmt.Errorf("attestation checks failed for predicate %s: no attestation of that type carries a certificate: one signed by a key verifies only against attestors naming the key (an entry without attestors is verified keyless, against the Sigstore trust root)", ac.predicateType)
	}
	keyless := imageverify.Attestor{Keyless: &imageverify.Keyless{CTLog: &imageverify.CTLog{IgnoreSCT: true}}}
	_, err = v.verifyEntry(ctx, e, keyless, ref, ac)
	return err
}

// secretKey is the public key a Secret holds under cosign.pub (Kyverno's
// keys.secret). A Secret that cannot be read is an error result, not a
// failure of the image: the operator grants tally-scanner get on it.
func (v *Verifier) secretKey(ctx context.Context, ref *imageverify.SecretRef) (string, error) {
	if v.opts.SecretData == nil {
		return "", infra(errors.New("keys.secret: Secrets are not read here (docs/known-differences.md)"))
	}
	data, err := v.opts.SecretData(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return "", infra(fmt.Errorf("failed to read secret %s/%s: %w", ref.Namespace, ref.Name, err))
	}
	pub, ok := data["cosign.pub"]
	if !ok {
		return "", fmt.Errorf("secret %s/%s has no cosign.pub", ref.Namespace, ref.Name)
	}
	return string(pub), nil
}

// signatureRepository is where an attestor's signatures are: its
// repository, else the entry's, else the image's own (moved false).
func signatureRepository(e *imageverify.Verification, a imageverify.Attestor, ref name.Digest) (repo name.Repository, moved bool, err error) {
	r := a.Repository
	if r == "" {
		r = e.Repository
	}
	if r == "" {
		return ref.Context(), false, nil
	}
	var opts []name.Option
	if rc := e.ImageRegistryCredentials; rc != nil && rc.AllowInsecureRegistry {
		opts = append(opts, name.Insecure)
	}
	if repo, err = name.NewRepository(r, opts...); err != nil {
		return repo, false, fmt.Errorf("repository %q: %w", r, err)
	}
	return repo, true, nil
}
