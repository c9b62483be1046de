package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Kinds of image validating policies tally evaluates (R42).
const (
	KindImageValidatingPolicy           = "ImageValidatingPolicy"
	KindNamespacedImageValidatingPolicy = "NamespacedImageValidatingPolicy"
)

// ImageValidatingPolicy verifies the signatures and attestations of the
// images a resource runs, with CEL validations that call the image
// verification functions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:scope=Cluster,shortName=ivpol,categories=kyverno
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ImageValidatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ImageValidatingPolicySpec `json:"spec"`
	Status            ValidatingPolicyStatus    `json:"status,omitempty"`
}

// ImageValidatingPolicyList is a list of ImageValidatingPolicies.
//
// +kubebuilder:object:root=true
type ImageValidatingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageValidatingPolicy `json:"items"`
}

// NamespacedImageValidatingPolicy is an ImageValidatingPolicy that applies
// only in its own namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:scope=Namespaced,shortName=nivpol,categories=kyverno
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type NamespacedImageValidatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ImageValidatingPolicySpec `json:"spec"`
	Status            ValidatingPolicyStatus    `json:"status,omitempty"`
}

// NamespacedImageValidatingPolicyList is a list of
// NamespacedImageValidatingPolicies.
//
// +kubebuilder:object:root=true
type NamespacedImageValidatingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NamespacedImageValidatingPolicy `json:"items"`
}

// ImageValidatingPolicySpec is a ValidatingPolicy's spec with the images to
// verify, the attestors and attestations the validations may name, and how
// digests and verification are required.
type ImageValidatingPolicySpec struct {
	MatchConstraints *admissionregistrationv1.MatchResources `json:"matchConstraints,omitempty"`
	// FailurePolicy (default Fail) decides what a match condition that errs does.
	// +kubebuilder:validation:Enum=Ignore;Fail
	FailurePolicy     *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	AuditAnnotations  []admissionregistrationv1.AuditAnnotation  `json:"auditAnnotations,omitempty"`
	ValidationActions []admissionregistrationv1.ValidationAction `json:"validationActions,omitempty"`
	MatchConditions   []admissionregistrationv1.MatchCondition   `json:"matchConditions,omitempty"`
	Variables         []admissionregistrationv1.Variable         `json:"variables,omitempty"`
	// ValidationConfigurations: verifyDigest and required default to true.
	ValidationConfigurations ImageValidationConfiguration `json:"validationConfigurations,omitempty"`
	// MatchImageReferences selects the images the policy verifies (a glob or
	// a CEL expression on `ref`); other images are not verified.
	MatchImageReferences []MatchImageReference `json:"matchImageReferences,omitempty"`
	Credentials          *ImageCredentials     `json:"credentials,omitempty"`
	// Images are CEL expressions naming lists of images of the resource
	// (Pods and Pod templates have theirs built in).
	Images []ImageExtractor `json:"images,omitempty"`
	// Attestors are required, as in Kyverno's CRD (an empty list is
	// accepted, as there).
	// +kubebuilder:validation:Required
	Attestors    []ImageAttestor    `json:"attestors"`
	Attestations []ImageAttestation `json:"attestations,omitempty"`
	// Validations are required, as in Kyverno's CRD.
	// +kubebuilder:validation:Required
	Validations          []admissionregistrationv1.Validation `json:"validations"`
	WebhookConfiguration *WebhookConfiguration                `json:"webhookConfiguration,omitempty"`
	Evaluation           *Evaluation                          `json:"evaluation,omitempty"`
	Autogen              *Autogen                             `json:"autogen,omitempty"`
}

// ImageValidationConfiguration says whether images must have a digest and
// must be verified (both default to true), and whether Kyverno's mutating
// webhook adds digests (tally runs none).
type ImageValidationConfiguration struct {
	MutateDigest *bool `json:"mutateDigest,omitempty"`
	VerifyDigest *bool `json:"verifyDigest,omitempty"`
	Required     *bool `json:"required,omitempty"`
}

// DigestVerified reports whether images must name a digest (default true).
func (c ImageValidationConfiguration) DigestVerified() bool {
	return c.VerifyDigest == nil || *c.VerifyDigest
}

// VerificationRequired reports whether every image must be verified by a
// verification function (default true).
func (c ImageValidationConfiguration) VerificationRequired() bool {
	return c.Required == nil || *c.Required
}

// MatchImageReference is a glob or a CEL expression on `ref`.
type MatchImageReference struct {
	Glob       string `json:"glob,omitempty"`
	Expression string `json:"expression,omitempty"`
}

// ImageExtractor names a CEL expression that gives a list of images.
type ImageExtractor struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

// ImageCredentials are how registries are reached: Secrets in tally's
// namespace, credential providers, insecure registries.
type ImageCredentials struct {
	AllowInsecureRegistry bool `json:"allowInsecureRegistry,omitempty"`
	// +kubebuilder:validation:items:Enum=default;amazon;azure;google;github
	Providers []string `json:"providers,omitempty"`
	Secrets   []string `json:"secrets,omitempty"`
}

// ImageAttestor is a named identity that signs images or attestations:
// cosign or notary.
type ImageAttestor struct {
	Name   string          `json:"name"`
	Cosign *CosignAttestor `json:"cosign,omitempty"`
	Notary *NotaryAttestor `json:"notary,omitempty"`
}

// CosignAttestor verifies cosign signatures with a key, a certificate or
// keyless identities.
type CosignAttestor struct {
	Key         *CosignKey         `json:"key,omitempty"`
	Keyless     *CosignKeyless     `json:"keyless,omitempty"`
	Certificate *CosignCertificate `json:"certificate,omitempty"`
	Source      *CosignSource      `json:"source,omitempty"`
	CTLog       *CosignCTLog       `json:"ctlog,omitempty"`
	TUF         *CosignTUF         `json:"tuf,omitempty"`
	Annotations map[string]string  `json:"annotations,omitempty"`
}

// StringOrExpression is a value, or a CEL expression that gives it.
type StringOrExpression struct {
	Value      string `json:"value,omitempty"`
	Expression string `json:"expression,omitempty"`
}

// NotaryAttestor verifies notary signatures with certificates.
type NotaryAttestor struct {
	Certs    *StringOrExpression `json:"certs,omitempty"`
	TSACerts *StringOrExpression `json:"tsaCerts,omitempty"`
}

// CosignTUF is where sigstore's trusted root is read.
type CosignTUF struct {
	Root   CosignTUFRoot `json:"root,omitempty"`
	Mirror string        `json:"mirror,omitempty"`
}

// CosignTUFRoot is a trusted root's location or data.
type CosignTUFRoot struct {
	Path string `json:"path,omitempty"`
	Data string `json:"data,omitempty"`
}

// CosignSource is where signatures are read from when not beside the image.
type CosignSource struct {
	Repository  string                        `json:"repository,omitempty"`
	PullSecrets []corev1.LocalObjectReference `json:"PullSecrets,omitempty"`
	TagPrefix   string                        `json:"tagPrefix,omitempty"`
}

// CosignCTLog is the transparency log and certificate log settings.
type CosignCTLog struct {
	URL                string `json:"url,omitempty"`
	RekorPubKey        string `json:"rekorPubKey,omitempty"`
	CTLogPubKey        string `json:"ctLogPubKey,omitempty"`
	TSACertChain       string `json:"tsaCertChain,omitempty"`
	InsecureIgnoreTlog bool   `json:"insecureIgnoreTlog,omitempty"`
	InsecureIgnoreSCT  bool   `json:"insecureIgnoreSCT,omitempty"`
}

// CosignKey is a public key: PEM data, a KMS reference or a CEL expression.
type CosignKey struct {
	Data          string `json:"data,omitempty"`
	KMS           string `json:"kms,omitempty"`
	HashAlgorithm string `json:"hashAlgorithm,omitempty"`
	Expression    string `json:"expression,omitempty"`
}

// CosignKeyless is Fulcio-issued certificates of the given identities.
type CosignKeyless struct {
	Identities []CosignIdentity `json:"identities"`
	Roots      string           `json:"roots,omitempty"`
}

// CosignIdentity is a certificate's issuer and subject (exact or regexp).
type CosignIdentity struct {
	Issuer        string `json:"issuer,omitempty"`
	Subject       string `json:"subject,omitempty"`
	IssuerRegExp  string `json:"issuerRegExp,omitempty"`
	SubjectRegExp string `json:"subjectRegExp,omitempty"`
}

// CosignCertificate is a signing certificate and its chain.
type CosignCertificate struct {
	Certificate      *StringOrExpression `json:"cert,omitempty"`
	CertificateChain *StringOrExpression `json:"certChain,omitempty"`
}

// ImageAttestation names an attestation type: an in-toto statement's
// predicate type, or an OCI referrer's artifact type.
type ImageAttestation struct {
	Name     string                `json:"name"`
	InToto   *ImageAttestationType `json:"intoto,omitempty"`
	Referrer *ImageAttestationType `json:"referrer,omitempty"`
}

// ImageAttestationType is the type an attestation is found by.
type ImageAttestationType struct {
	Type string `json:"type"`
}

// AdmissionEnabled reports whether the policy runs at admission.
func (s *ImageValidatingPolicySpec) AdmissionEnabled() bool {
	return s.Evaluation == nil || s.Evaluation.Admission.On()
}

// BackgroundEnabled reports whether the policy runs in background scans.
func (s *ImageValidatingPolicySpec) BackgroundEnabled() bool {
	return s.Evaluation == nil || s.Evaluation.Background.On()
}

// ImageValidatingFromObject reads an ImageValidatingPolicy or a
// NamespacedImageValidatingPolicy (of any served version: one spec) from
// its JSON form, told apart by Kind and namespace.
func ImageValidatingFromObject(obj map[string]any) (*ImageValidatingPolicy, error) {
	var p ImageValidatingPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
		return nil, err
	}
	if p.Kind == "" {
		p.Kind = KindImageValidatingPolicy
	}
	return &p, nil
}
