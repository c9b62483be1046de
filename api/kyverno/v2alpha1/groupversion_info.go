// Package v2alpha1 contains kyverno.io/v2alpha1 types tally reads or writes.
//
// +kubebuilder:object:generate=true
// +groupName=kyverno.io
package v2alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: "kyverno.io", Version: "v2alpha1"}

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes()...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
