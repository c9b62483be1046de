// Package imageverify holds what the engine and a verifier share about the
// image verification of a classic verifyImages rule (R41): the rule's
// entries as written, the check the engine asks for one image, and its
// outcome. The verification itself (registry, cosign) is in the sigverify
// package, so that the engine builds without it.
package imageverify

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Signature types of a verifyImages entry (Cosign when none is given).
const (
	TypeCosign = "Cosign"
	TypeNotary = "Notary"
)

// Verification is one entry of a rule's verifyImages list.
type Verification struct {
	Type                string   `json:"type,omitempty"`
	ImageReferences     []string `json:"imageReferences,omitempty"`
	SkipImageReferences []string `json:"skipImageReferences,omitempty"`
	// Image, Key, Roots, Subject and Issuer are the deprecated one-attestor
	// form (Convert turns them into Attestors).
	Image        string        `json:"image,omitempty"`
	Key          string        `json:"key,omitempty"`
	Roots        string        `json:"roots,omitempty"`
	Subject      string        `json:"subject,omitempty"`
	Issuer       string        `json:"issuer,omitempty"`
	Attestors    []AttestorSet `json:"attestors,omitempty"`
	Attestations []Attestation `json:"attestations,omitempty"`
	// Repository holds the signatures when they are not beside the image.
	Repository               string               `json:"repository,omitempty"`
	MutateDigest             *bool                `json:"mutateDigest,omitempty"`
	VerifyDigest             *bool                `json:"verifyDigest,omitempty"`
	Required                 *bool                `json:"required,omitempty"`
	UseCache                 *bool                `json:"useCache,omitempty"`
	ImageRegistryCredentials *RegistryCredentials `json:"imageRegistryCredentials,omitempty"`
	FailureAction            string               `json:"failureAction,omitempty"`
	Validate                 json.RawMessage      `json:"validate,omitempty"`
}

// RegistryCredentials names the Secrets that hold registry credentials.
type RegistryCredentials struct {
	AllowInsecureRegistry bool     `json:"allowInsecureRegistry,omitempty"`
	Secrets               []string `json:"secrets,omitempty"`
}

// AttestorSet is satisfied when Count of its entries verify (all when
// Count is not given).
type AttestorSet struct {
	Count   *int       `json:"count,omitempty"`
	Entries []Attestor `json:"entries,omitempty"`
}

// Attestor is one way to verify: keys, certificates, keyless, or a nested set.
type Attestor struct {
	Keys         *StaticKeys       `json:"keys,omitempty"`
	Certificates *Certificates     `json:"certificates,omitempty"`
	Keyless      *Keyless          `json:"keyless,omitempty"`
	Attestor     json.RawMessage   `json:"attestor,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Repository   string            `json:"repository,omitempty"`
}

// StaticKeys are public keys (PEM), or a Secret or KMS reference to them.
type StaticKeys struct {
	PublicKeys         string     `json:"publicKeys,omitempty"`
	SignatureAlgorithm string     `json:"signatureAlgorithm,omitempty"`
	KMS                string     `json:"kms,omitempty"`
	Secret             *SecretRef `json:"secret,omitempty"`
	Rekor              *Rekor     `json:"rekor,omitempty"`
	CTLog              *CTLog     `json:"ctlog,omitempty"`
}

// SecretRef names a Secret.
type SecretRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// Certificates verify with a certificate and its chain.
type Certificates struct {
	Certificate      string `json:"cert,omitempty"`
	CertificateChain string `json:"certChain,omitempty"`
	Rekor            *Rekor `json:"rekor,omitempty"`
	CTLog            *CTLog `json:"ctlog,omitempty"`
}

// Keyless verifies a Fulcio-issued certificate's identity.
type Keyless struct {
	Issuer        string `json:"issuer,omitempty"`
	IssuerRegExp  string `json:"issuerRegExp,omitempty"`
	Subject       string `json:"subject,omitempty"`
	SubjectRegExp string `json:"subjectRegExp,omitempty"`
	Roots         string `json:"roots,omitempty"`
	Rekor         *Rekor `json:"rekor,omitempty"`
	CTLog         *CTLog `json:"ctlog,omitempty"`
}

// Rekor is the transparency log to check (or not).
type Rekor struct {
	URL        string `json:"url,omitempty"`
	PubKey     string `json:"pubkey,omitempty"`
	IgnoreTlog bool   `json:"ignoreTlog,omitempty"`
}

// CTLog is the certificate transparency log to check (or not), and the
// timestamping authorities' certificates (Notary).
type CTLog struct {
	IgnoreSCT    bool   `json:"ignoreSCT,omitempty"`
	PubKey       string `json:"pubkey,omitempty"`
	TSACertChain string `json:"tsaCertChain,omitempty"`
}

// Attestation is an in-toto attestation of a predicate type, its attestors
// and the conditions its predicate must meet.
type Attestation struct {
	Name          string          `json:"name,omitempty"`
	Type          string          `json:"type,omitempty"`
	PredicateType string          `json:"predicateType,omitempty"`
	Attestors     []AttestorSet   `json:"attestors,omitempty"`
	Conditions    json.RawMessage `json:"conditions,omitempty"`
}

// Parse reads a rule's verifyImages list.
func Parse(raw []byte) ([]Verification, error) {
	var out []Verification
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("verifyImages: %w", err)
	}
	for i := range out {
		out[i].convert()
	}
	return out, nil
}

// convert turns the deprecated one-attestor fields into imageReferences
// and attestors, as Kyverno does.
func (v *Verification) convert() {
	if v.Image != "" && len(v.ImageReferences) == 0 {
		v.ImageReferences = []string{v.Image}
	}
	if len(v.Attestors) > 0 || (v.Key == "" && v.Subject == "" && v.Issuer == "" && v.Roots == "") {
		return
	}
	var a Attestor
	if v.Key != "" {
		a.Keys = &StaticKeys{PublicKeys: v.Key}
	} else {
		a.Keyless = &Keyless{Issuer: v.Issuer, Subject: v.Subject, Roots: v.Roots}
	}
	v.Attestors = []AttestorSet{{Entries: []Attestor{a}}}
}

// On reads an optional switch that defaults to true.
func On(b *bool) bool { return b == nil || *b }

// RequiredCount is how many entries of the set must verify.
func (s AttestorSet) RequiredCount() int {
	if s.Count == nil || *s.Count == 0 || *s.Count > len(s.Entries) {
		return len(s.Entries)
	}
	return *s.Count
}

// ExpandKeys gives each public key of a PEM bundle an entry of its own, as
// Kyverno does, so that count counts keys.
func (s AttestorSet) ExpandKeys() AttestorSet {
	out := AttestorSet{Count: s.Count}
	for _, e := range s.Entries {
		if e.Keys == nil || e.Keys.PublicKeys == "" || strings.Count(e.Keys.PublicKeys, "-----BEGIN") < 2 {
			out.Entries = append(out.Entries, e)
			continue
		}
		for _, pem := range splitPEM(e.Keys.PublicKeys) {
			k := *e.Keys
			k.PublicKeys = pem
			one := e
			one.Keys = &k
			out.Entries = append(out.Entries, one)
		}
	}
	return out
}

func splitPEM(s string) []string {
	var out []string
	for {
		i := strings.Index(s, "-----BEGIN")
		if i < 0 {
			return out
		}
		s = s[i:]
		end := strings.Index(s, "-----END")
		if end < 0 {
			return append(out, s)
		}
		close := strings.Index(s[end+len("-----END"):], "-----")
		if close < 0 {
			return append(out, s)
		}
		stop := end + len("-----END") + close + len("-----")
		out = append(out, s[:stop]+"\n")
		s = s[stop:]
	}
}

// Check asks a verifier about one image under one verifyImages entry.
type Check struct {
	// Image is the reference as the resource gives it, completed as Kyverno
	// prints it (registry/path:tag or registry/path@digest).
	Image string
	// Policy names the policy (for metrics).
	Policy string
	// NameDigest: the outcome's messages name the image by its resolved
	// digest (registry/path@digest), as Kyverno's do for an entry with
	// verifyDigest on (its CRD's default in a cluster).
	NameDigest bool
	// Tenant is set for a namespaced Policy's check: no credentials of
	// tally's (--image-pull-secrets, Secrets of its namespace) are used.
	Tenant bool
	// Identity identifies the rule's entry: the policy, the rule and the
	// entry as written, so that a changed policy is verified again.
	Identity string
	// Entry is the verifyImages entry, variables substituted.
	Entry *Verification
	// Statements asks, for an entry with attestations, for the in-toto
	// statements checked (Outcome.Statements; the first of each kept).
	Statements bool
	// Namespace and PullSecrets are the resource's namespace and its pod
	// spec's imagePullSecrets: credentials for the registry, read from
	// that namespace when the verifier is allowed to.
	Namespace   string
	PullSecrets []string
	// Conditions checks an attestation's predicate against the conditions
	// of Entry.Attestations[i] (nil error: they hold).
	Conditions func(i int, statement map[string]any) error
}

// Outcome is what a verifier found.
type Outcome struct {
	// Result is pass, fail or error.
	Result  string
	Message string
	// Digest is the image's digest, when it was resolved.
	Digest string
	// Cached says that the outcome came from the verification cache.
	Cached bool
	// Statements are, for a pass of an entry with attestations, the in-toto
	// statements checked for each attestation (by index).
	Statements [][]map[string]any
}
