package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Kinds of mutating policies tally scans in the background (R44).
const (
	KindMutatingPolicy           = "MutatingPolicy"
	KindNamespacedMutatingPolicy = "NamespacedMutatingPolicy"
)

// MutatingPolicy mutates resources with CEL expressions (a
// MutatingAdmissionPolicy with Kyverno's additions). tally runs no mutating
// webhook: it reports, in background scans, whether the policy's mutations
// are applied to the resources that exist.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:scope=Cluster,shortName=mpol,categories=kyverno
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type MutatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MutatingPolicySpec     `json:"spec"`
	Status            ValidatingPolicyStatus `json:"status,omitempty"`
}

// MutatingPolicyList is a list of MutatingPolicies.
//
// +kubebuilder:object:root=true
type MutatingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MutatingPolicy `json:"items"`
}

// NamespacedMutatingPolicy is a MutatingPolicy that applies only in its own
// namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:scope=Namespaced,shortName=nmpol,categories=kyverno
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type NamespacedMutatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MutatingPolicySpec     `json:"spec"`
	Status            ValidatingPolicyStatus `json:"status,omitempty"`
}

// NamespacedMutatingPolicyList is a list of NamespacedMutatingPolicies.
//
// +kubebuilder:object:root=true
type NamespacedMutatingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NamespacedMutatingPolicy `json:"items"`
}

// MutatingPolicySpec is a MutatingAdmissionPolicy's spec with Kyverno's
// additions. ReinvocationPolicy and WebhookConfiguration are kept as
// written: a background scan does not use them; TargetMatchConstraints and
// TargetMatchConditions choose the existing resources a mutateExisting
// policy mutates (tally test and apply).
type MutatingPolicySpec struct {
	MatchConstraints *admissionregistrationv1.MatchResources `json:"matchConstraints,omitempty"`
	// FailurePolicy (default Fail) decides what a match condition that errs does.
	FailurePolicy   *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	MatchConditions []admissionregistrationv1.MatchCondition   `json:"matchConditions,omitempty"`
	Variables       []admissionregistrationv1.Variable         `json:"variables,omitempty"`
	// Mutations are applied in order, each to the result of the one before.
	Mutations              []admissionregistrationv1beta1.Mutation        `json:"mutations,omitempty"`
	ReinvocationPolicy     admissionregistrationv1.ReinvocationPolicyType `json:"reinvocationPolicy,omitempty"`
	TargetMatchConstraints *TargetMatchConstraints                        `json:"targetMatchConstraints,omitempty"`
	// TargetMatchConditions must all hold on a target for it to be mutated.
	// +listType=map
	// +listMapKey=name
	TargetMatchConditions []admissionregistrationv1.MatchCondition `json:"targetMatchConditions,omitempty"`
	Evaluation            *MutatingEvaluation                      `json:"evaluation,omitempty"`
	WebhookConfiguration  *WebhookConfiguration                    `json:"webhookConfiguration,omitempty"`
	Autogen               *Autogen                                 `json:"autogen,omitempty"`
}

// TargetMatchConstraints chooses the targets of a mutateExisting policy:
// the resources its Expression resolves (one object, or a list's items),
// evaluated on the trigger, or else those its resource rules match (the
// policy's matchConstraints when it gives none), whatever the operation.
type TargetMatchConstraints struct {
	// Expression resolves one target object or a list of them ({items:
	// [...]}) from the trigger (object, variables, resource library).
	Expression string `json:"expression,omitempty"`
	// MatchResources constrains the targets when Expression is empty.
	admissionregistrationv1.MatchResources `json:",inline"`
}

// MutateExistingEnabled says whether the policy mutates existing
// resources (off unless turned on).
func (s *MutatingPolicySpec) MutateExistingEnabled() bool {
	e := s.Evaluation
	return e != nil && e.MutateExisting != nil && e.MutateExisting.Enabled != nil && *e.MutateExisting.Enabled
}

// MutatingEvaluation says where a MutatingPolicy runs: at admission, in
// background scans (both on unless turned off) and on existing targets
// (off unless turned on).
type MutatingEvaluation struct {
	Admission      *Toggle `json:"admission,omitempty"`
	Background     *Toggle `json:"background,omitempty"`
	MutateExisting *Toggle `json:"mutateExisting,omitempty"`
}

// BackgroundEnabled reports whether the policy runs in background scans.
func (s *MutatingPolicySpec) BackgroundEnabled() bool {
	return s.Evaluation == nil || s.Evaluation.Background.On()
}

// MutatingFromObject reads a MutatingPolicy or a NamespacedMutatingPolicy
// (of any served version: one spec) from its JSON form into a
// MutatingPolicy, told apart by Kind and namespace.
func MutatingFromObject(obj map[string]any) (*MutatingPolicy, error) {
	var p MutatingPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
		return nil, err
	}
	if p.Kind == "" {
		p.Kind = KindMutatingPolicy
	}
	return &p, nil
}
