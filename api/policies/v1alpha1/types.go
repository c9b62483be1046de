// Package v1alpha1 contains the policies.kyverno.io/v1alpha1 versions of tally's CEL
// policy kinds. Kyverno serves them with the same spec as v1; so does
// tally's CRD (stored as v1, no conversion needed). tally reads them as v1:
// these types exist so that controller-gen adds v1alpha1 to the generated CRDs,
// and so that clients can write v1alpha1 manifests.
//
// +kubebuilder:object:generate=true
// +groupName=policies.kyverno.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
)

// GroupVersion is the group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: policiesv1.Group, Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// The specs are v1's; the doc comments of the kinds are v1's word for word,
// so that the schemas' descriptions are identical in every version.

// ValidatingPolicySpec is v1's.
type ValidatingPolicySpec = policiesv1.ValidatingPolicySpec

// ValidatingPolicyStatus is v1's.
type ValidatingPolicyStatus = policiesv1.ValidatingPolicyStatus

// PolicyExceptionSpec is v1's.
type PolicyExceptionSpec = policiesv1.PolicyExceptionSpec

// ValidatingPolicy validates resources with CEL expressions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
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

// PolicyException exempts resources from CEL policies.
//
// +kubebuilder:object:root=true
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

// MutatingPolicySpec is v1's.
type MutatingPolicySpec = policiesv1.MutatingPolicySpec

// MutatingPolicy mutates resources with CEL expressions (a
// MutatingAdmissionPolicy with Kyverno's additions). tally runs no mutating
// webhook: it reports, in background scans, whether the policy's mutations
// are applied to the resources that exist.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
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

// ImageValidatingPolicySpec is v1's.
type ImageValidatingPolicySpec = policiesv1.ImageValidatingPolicySpec

// ImageValidatingPolicy verifies the signatures and attestations of the
// images a resource runs, with CEL validations that call the image
// verification functions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
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

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ValidatingPolicy{}, &ValidatingPolicyList{},
		&PolicyException{}, &PolicyExceptionList{},
		&MutatingPolicy{}, &MutatingPolicyList{},
		&ImageValidatingPolicy{}, &ImageValidatingPolicyList{},
		&NamespacedImageValidatingPolicy{}, &NamespacedImageValidatingPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
