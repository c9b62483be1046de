package engine

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/imageverify"
)

// checkVerifyImages refuses the verifyImages entries Kyverno's policy
// validation refuses (issue 54), with its messages: an entry without image
// references; mutateDigest under Audit; an attestor set without entries,
// or whose count exceeds them; an attestor that is not exactly one of keys,
// certificates, keyless or a nested set; keys without a key, or with an
// unknown signature algorithm; certificates without one; keyless without a
// Rekor URL or roots, or with a Rekor that has no URL (ignoreTlog alone
// included); keys or keyless in a Notary entry. audit is the rule's
// failure action (an entry's own failureAction wins).
func checkVerifyImages(path *field.Path, raw []byte, audit bool) []error {
	entries, err := imageverify.Parse(raw)
	if err != nil {
		return []error{field.Invalid(path, string(raw), err.Error())}
	}
	var errs []error
	for i := range entries {
		e := &entries[i]
		p := path.Index(i)
		entryAudit := audit
		if e.FailureAction != "" {
			entryAudit = kyvernov1.ValidationFailureAction(e.FailureAction).Audit()
		}
		if entryAudit && e.MutateDigest != nil && *e.MutateDigest {
			errs = append(errs, field.Invalid(p.Child("mutateDigest"), true, "mutateDigest must be set to false for ‘Audit’ failure action"))
		}
		if len(e.ImageReferences) == 0 {
			errs = append(errs, field.Invalid(p, "", "An image reference is required"))
		}
		for j, a := range e.Attestations {
			for k := range a.Attestors {
				errs = append(errs, checkAttestorSet(p.Child("attestations").Index(j).Child("attestors").Index(k), &a.Attestors[k])...)
			}
		}
		for k := range e.Attestors {
			errs = append(errs, checkAttestorSet(p.Child("attestors").Index(k), &e.Attestors[k])...)
		}
		if e.Type == imageverify.TypeNotary {
			for _, set := range e.Attestors {
				for _, a := range set.Entries {
					if a.Keyless != nil {
						errs = append(errs, field.Invalid(p.Child("attestors"), "", "Keyless field is not allowed for type notary"))
					}
					if a.Keys != nil {
						errs = append(errs, field.Invalid(p.Child("attestors"), "", "Keys field is not allowed for type notary"))
					}
				}
			}
		}
	}
	return errs
}

// signatureAlgorithms are the keys' signatureAlgorithm values Kyverno takes.
var signatureAlgorithms = map[string]bool{"": true, "sha224": true, "sha256": true, "sha384": true, "sha512": true}

func checkAttestorSet(path *field.Path, set *imageverify.AttestorSet) []error {
	var errs []error
	if set.Count != nil && *set.Count > len(set.Entries) {
		errs = append(errs, field.Invalid(path, *set.Count, "Count cannot exceed length of entries"))
	}
	if len(set.Entries) == 0 {
		errs = append(errs, field.Invalid(path, "", "An entry is required"))
	}
	for i, a := range set.Entries {
		p := path.Child("entries").Index(i)
		n := 0
		for _, set := range []bool{a.Keys != nil, a.Certificates != nil, a.Keyless != nil, len(a.Attestor) > 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, field.Invalid(p, "", "keys, certificates, keyless, or a nested attestor is required"))
		}
		if k := a.Keys; k != nil {
			if k.PublicKeys == "" && k.KMS == "" && k.Secret == nil {
				errs = append(errs, field.Invalid(p.Child("keys"), "", "A public key, kms key or secret is required"))
			}
			if k.PublicKeys != "" && !signatureAlgorithms[k.SignatureAlgorithm] {
				errs = append(errs, field.Invalid(p.Child("keys"), k.SignatureAlgorithm, "Invalid signature algorithm provided"))
			}
		}
		if c := a.Certificates; c != nil && c.Certificate == "" && c.CertificateChain == "" {
			errs = append(errs, field.Invalid(p.Child("certificates"), "", "cert or certChain required"))
		}
		if kl := a.Keyless; kl != nil {
			if kl.Rekor == nil && kl.Roots == "" {
				errs = append(errs, field.Invalid(p.Child("keyless"), "", "Either Rekor URL or roots are required"))
			}
			if kl.Rekor != nil && kl.Rekor.URL == "" {
				errs = append(errs, field.Invalid(p.Child("keyless"), "", "An URL is required"))
			}
		}
		if len(a.Attestor) > 0 {
			var nested imageverify.AttestorSet
			if err := json.Unmarshal(a.Attestor, &nested); err != nil {
				errs = append(errs, field.Invalid(p.Child("attestor"), string(a.Attestor), err.Error()))
			} else {
				errs = append(errs, checkAttestorSet(p.Child("attestor"), &nested)...)
			}
		}
	}
	return errs
}
