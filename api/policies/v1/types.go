package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Kinds of policies.kyverno.io that tally evaluates.
const (
	KindValidatingPolicy           = "ValidatingPolicy"
	KindNamespacedValidatingPolicy = "NamespacedValidatingPolicy"
	KindPolicyException            = "PolicyException"
)

// ValidatingPolicy validates resources with CEL expressions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:scope=Cluster,shortName=vpol,categories=kyverno
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ValidatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ValidatingPolicySpec   `json:"spec"`
	Status            ValidatingPolicyStatus `json:"status,omitempty"`
}

// ValidatingPolicyList is a list of ValidatingPolicies.
//
// +kubebuilder:object:root=true
type ValidatingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ValidatingPolicy `json:"items"`
}

// NamespacedValidatingPolicy is a ValidatingPolicy that applies only in its
// own namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:scope=Namespaced,shortName=nvpol,categories=kyverno
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type NamespacedValidatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ValidatingPolicySpec   `json:"spec"`
	Status            ValidatingPolicyStatus `json:"status,omitempty"`
}

// NamespacedValidatingPolicyList is a list of NamespacedValidatingPolicies.
//
// +kubebuilder:object:root=true
type NamespacedValidatingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NamespacedValidatingPolicy `json:"items"`
}

// FromObject reads a ValidatingPolicy or a NamespacedValidatingPolicy (of
// any served version: one spec) from its JSON form into a ValidatingPolicy:
// the engine evaluates both kinds alike, told apart by Kind and namespace.
func FromObject(obj map[string]any) (*ValidatingPolicy, error) {
	var p ValidatingPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
		return nil, err
	}
	if p.Kind == "" {
		p.Kind = KindValidatingPolicy
	}
	return &p, nil
}

// ValidatingPolicySpec is a ValidatingAdmissionPolicy's spec with Kyverno's
// additions (evaluation modes, autogen, webhook settings).
type ValidatingPolicySpec struct {
	MatchConstraints  *admissionregistrationv1.MatchResources    `json:"matchConstraints,omitempty"`
	MatchConditions   []admissionregistrationv1.MatchCondition   `json:"matchConditions,omitempty"`
	Variables         []admissionregistrationv1.Variable         `json:"variables,omitempty"`
	Validations       []admissionregistrationv1.Validation       `json:"validations,omitempty"`
	AuditAnnotations  []admissionregistrationv1.AuditAnnotation  `json:"auditAnnotations,omitempty"`
	ValidationActions []admissionregistrationv1.ValidationAction `json:"validationActions,omitempty"`
	// FailurePolicy (default Fail) decides what a match condition that errs does.
	FailurePolicy        *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	Evaluation           *Evaluation                                `json:"evaluation,omitempty"`
	WebhookConfiguration *WebhookConfiguration                      `json:"webhookConfiguration,omitempty"`
	Autogen              *Autogen                                   `json:"autogen,omitempty"`
}

// Evaluation says where the policy runs.
type Evaluation struct {
	// Mode is Kubernetes (the default), JSON, Envoy or HTTP; only Kubernetes
	// policies match resources (JSON ones evaluate JSON payloads, Envoy and
	// HTTP ones authorize requests of that kind).
	// +kubebuilder:validation:Enum=Kubernetes;JSON;Envoy;HTTP
	Mode       string  `json:"mode,omitempty"`
	Admission  *Toggle `json:"admission,omitempty"`
	Background *Toggle `json:"background,omitempty"`
}

// SourceGeneratingPolicy is the source of a GeneratingPolicy's results in
// reports (Kyverno's spelling).
const SourceGeneratingPolicy = "KyvernoGeneratingPolicy"

// Toggle is an enabled flag that defaults to true.
type Toggle struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// On reports whether a toggle is on (absent means on).
func (t *Toggle) On() bool { return t == nil || t.Enabled == nil || *t.Enabled }

// WebhookConfiguration holds webhook settings (not used in reports).
type WebhookConfiguration struct {
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// Autogen configures the policies generated for Pod controllers.
type Autogen struct {
	PodControllers            *PodControllers `json:"podControllers,omitempty"`
	ValidatingAdmissionPolicy *Toggle         `json:"validatingAdmissionPolicy,omitempty"`
}

// PodControllers lists the controllers to generate for; nil means all of
// them, an empty list none.
type PodControllers struct {
	Controllers []string `json:"controllers"`
}

// ValidatingPolicyStatus is what Kyverno writes back; Generated says a
// ValidatingAdmissionPolicy was generated in the policy's place. The rest
// (conditions, autogen) is kept as written.
type ValidatingPolicyStatus struct {
	Generated bool `json:"generated,omitempty"`
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	ConditionStatus *apiextv1.JSON `json:"conditionStatus,omitempty"`
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	Autogen *apiextv1.JSON `json:"autogen,omitempty"`
}

// AdmissionEnabled reports whether the policy runs at admission.
func (s *ValidatingPolicySpec) AdmissionEnabled() bool {
	return s.Evaluation == nil || s.Evaluation.Admission.On()
}

// BackgroundEnabled reports whether the policy runs in background scans.
func (s *ValidatingPolicySpec) BackgroundEnabled() bool {
	return s.Evaluation == nil || s.Evaluation.Background.On()
}

// PolicyException exempts resources from CEL policies.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:scope=Namespaced,categories=kyverno
type PolicyException struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PolicyExceptionSpec `json:"spec"`
}

// PolicyExceptionList is a list of PolicyExceptions.
//
// +kubebuilder:object:root=true
type PolicyExceptionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicyException `json:"items"`
}

// PolicyExceptionSpec names the policies exempted and when.
type PolicyExceptionSpec struct {
	PolicyRefs      []PolicyRef                              `json:"policyRefs"`
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`
	// Images and AllowedValues make a partial exception: the policy reads
	// them as exceptions.allowedImages and exceptions.allowedValues.
	Images        []string `json:"images,omitempty"`
	AllowedValues []string `json:"allowedValues,omitempty"`
	// ReportResult is skip (the default) or pass.
	ReportResult string            `json:"reportResult,omitempty"`
	ExpiresAt    *metav1.Time      `json:"expiresAt,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
}

// PolicyRef names a policy by name and kind.
type PolicyRef struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}
