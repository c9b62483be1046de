// Package v1 holds the policies.kyverno.io kinds tally reads:
// ValidatingPolicy, NamespacedValidatingPolicy, the CEL PolicyException,
// MutatingPolicy and NamespacedMutatingPolicy, ImageValidatingPolicy and
// NamespacedImageValidatingPolicy.
// Kyverno serves them as v1alpha1 (ValidatingPolicy and PolicyException
// only), v1beta1 and v1 with one spec; so does tally's CRD, stored as v1
// (no conversion needed). tally reads them as v1.
//
// +kubebuilder:object:generate=true
// +groupName=policies.kyverno.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of these kinds.
const Group = "policies.kyverno.io"

// GroupVersion is the group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: Group, Version: "v1"}

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ValidatingPolicy{}, &ValidatingPolicyList{},
		&NamespacedValidatingPolicy{}, &NamespacedValidatingPolicyList{},
		&PolicyException{}, &PolicyExceptionList{},
		&MutatingPolicy{}, &MutatingPolicyList{},
		&NamespacedMutatingPolicy{}, &NamespacedMutatingPolicyList{},
		&ImageValidatingPolicy{}, &ImageValidatingPolicyList{},
		&NamespacedImageValidatingPolicy{}, &NamespacedImageValidatingPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
