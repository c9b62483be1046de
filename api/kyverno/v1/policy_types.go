package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ValidationFailureAction is what a failed validate rule does at admission.
// +kubebuilder:validation:Enum=audit;enforce;Audit;Enforce
type ValidationFailureAction string

const (
	// Audit admits the request and reports the failure.
	Audit ValidationFailureAction = "Audit"
	// Enforce denies the request.
	Enforce ValidationFailureAction = "Enforce"
)

// Enforce reports whether the action blocks requests (case-insensitive, as Kyverno).
func (a ValidationFailureAction) Enforce() bool {
	return a == Enforce || a == "enforce"
}

// Audit reports whether the action only reports (the default when unset).
func (a ValidationFailureAction) Audit() bool { return !a.Enforce() }

// FailurePolicyType says what the webhook does when a policy cannot be evaluated.
// +kubebuilder:validation:Enum=Ignore;Fail
type FailurePolicyType string

const (
	// Ignore admits the request when evaluation fails.
	Ignore FailurePolicyType = "Ignore"
	// Fail denies the request when evaluation fails.
	Fail FailurePolicyType = "Fail"
)

// ApplyRulesType says whether all matching rules apply or only the first.
// +kubebuilder:validation:Enum=All;One
type ApplyRulesType string

// ValidationFailureActionOverride sets the failure action for some namespaces.
type ValidationFailureActionOverride struct {
	// +kubebuilder:validation:Enum=audit;enforce;Audit;Enforce
	Action            ValidationFailureAction `json:"action,omitempty"`
	Namespaces        []string                `json:"namespaces,omitempty"`
	NamespaceSelector *metav1.LabelSelector   `json:"namespaceSelector,omitempty"`
}

// WebhookConfiguration tunes the admission webhook registered for a policy.
type WebhookConfiguration struct {
	FailurePolicy   *FailurePolicyType                       `json:"failurePolicy,omitempty"`
	TimeoutSeconds  *int32                                   `json:"timeoutSeconds,omitempty"`
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`
}

// Spec is the body of a ClusterPolicy or Policy.
type Spec struct {
	// Rules are evaluated in order.
	Rules []Rule `json:"rules,omitempty"`
	// ApplyRules is All (default) or One.
	ApplyRules *ApplyRulesType `json:"applyRules,omitempty"`
	// FailurePolicy applies when the policy cannot be evaluated at admission.
	FailurePolicy *FailurePolicyType `json:"failurePolicy,omitempty"`
	// ValidationFailureAction is the policy-level default failure action (deprecated in
	// favour of validate.failureAction, still honoured).
	ValidationFailureAction ValidationFailureAction `json:"validationFailureAction,omitempty"`
	// ValidationFailureActionOverrides set the failure action per namespace.
	ValidationFailureActionOverrides []ValidationFailureActionOverride `json:"validationFailureActionOverrides,omitempty"`
	// EmitWarning returns audit results as admission warnings.
	EmitWarning *bool `json:"emitWarning,omitempty"`
	// Admission turns admission processing on (default) or off.
	// +kubebuilder:default=true
	Admission *bool `json:"admission,omitempty"`
	// Background turns background scanning on (default) or off.
	// +kubebuilder:default=true
	Background *bool `json:"background,omitempty"`
	// SchemaValidation is deprecated and ignored.
	SchemaValidation *bool `json:"schemaValidation,omitempty"`
	// WebhookTimeoutSeconds bounds admission evaluation.
	WebhookTimeoutSeconds *int32 `json:"webhookTimeoutSeconds,omitempty"`
	// WebhookConfiguration tunes the registered webhook.
	WebhookConfiguration *WebhookConfiguration `json:"webhookConfiguration,omitempty"`
	// The fields below belong to mutate/generate policies; tally keeps them so
	// that such policies round-trip, and ignores them.
	MutateExistingOnPolicyUpdate   bool  `json:"mutateExistingOnPolicyUpdate,omitempty"`
	GenerateExisting               bool  `json:"generateExisting,omitempty"`
	GenerateExistingOnPolicyUpdate *bool `json:"generateExistingOnPolicyUpdate,omitempty"`
	UseServerSideApply             bool  `json:"useServerSideApply,omitempty"`
}

// BackgroundEnabled reports whether background scanning is on (default true).
func (s *Spec) BackgroundEnabled() bool { return s.Background == nil || *s.Background }

// AdmissionEnabled reports whether admission processing is on (default true).
func (s *Spec) AdmissionEnabled() bool { return s.Admission == nil || *s.Admission }

// PolicyStatus is what a policy controller reports about a policy.
type PolicyStatus struct {
	// +optional
	Ready bool `json:"ready,omitempty"`
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	RuleCount *RuleCountStatus `json:"rulecount,omitempty"`
	// Autogen and other status parts written by Kyverno are kept as they are.
	// +optional
	Autogen *apiextv1.JSON `json:"autogen,omitempty"`
	// +optional
	ValidatingAdmissionPolicy *apiextv1.JSON `json:"validatingadmissionpolicy,omitempty"`
}

// RuleCountStatus counts the rules of a policy by type.
type RuleCountStatus struct {
	Validate int `json:"validate"`
	Generate int `json:"generate"`
	Mutate   int `json:"mutate"`
	Verify   int `json:"verifyimages"`
}

// The printer columns of ClusterPolicy and Policy (both versions) are
// Kyverno's, but for its rule counts (VALIDATE, MUTATE, GENERATE, VERIFY
// IMAGES, shown by -o wide), which tally does not write: READY and MESSAGE
// read the Ready condition the scanner keeps, and ADMISSION and BACKGROUND
// are never empty since the API server defaults them to true, as Kyverno's
// CRDs do.

// ClusterPolicy is a cluster-wide policy.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cpol,categories=kyverno
// +kubebuilder:printcolumn:name="ADMISSION",type=boolean,JSONPath=".spec.admission"
// +kubebuilder:printcolumn:name="BACKGROUND",type=boolean,JSONPath=".spec.background"
// +kubebuilder:printcolumn:name="READY",type=string,JSONPath=`.status.conditions[?(@.type == "Ready")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="FAILURE POLICY",type=string,JSONPath=".spec.failurePolicy",priority=1
// +kubebuilder:printcolumn:name="MESSAGE",type=string,JSONPath=`.status.conditions[?(@.type == "Ready")].message`
// +kubebuilder:storageversion
type ClusterPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec         `json:"spec"`
	Status            PolicyStatus `json:"status,omitempty"`
}

// ClusterPolicyList is a list of ClusterPolicies.
//
// +kubebuilder:object:root=true
type ClusterPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPolicy `json:"items"`
}

// Policy is a policy that applies only in its own namespace.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=pol,categories=kyverno
// +kubebuilder:printcolumn:name="ADMISSION",type=boolean,JSONPath=".spec.admission"
// +kubebuilder:printcolumn:name="BACKGROUND",type=boolean,JSONPath=".spec.background"
// +kubebuilder:printcolumn:name="READY",type=string,JSONPath=`.status.conditions[?(@.type == "Ready")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="FAILURE POLICY",type=string,JSONPath=".spec.failurePolicy",priority=1
// +kubebuilder:printcolumn:name="MESSAGE",type=string,JSONPath=`.status.conditions[?(@.type == "Ready")].message`
// +kubebuilder:storageversion
type Policy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec         `json:"spec"`
	Status            PolicyStatus `json:"status,omitempty"`
}

// PolicyList is a list of Policies.
//
// +kubebuilder:object:root=true
type PolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Policy `json:"items"`
}
