// Package v2beta1 contains the kyverno.io/v2beta1 versions of ClusterPolicy
// and Policy. Kyverno serves both kinds as v1 and v2beta1 with one schema;
// so does tally's CRD (storage stays v1, no conversion needed). tally reads
// policies as v1 only: the API server serves every stored policy as v1,
// whichever version it was created with. These types exist so that
// controller-gen adds v2beta1 to the generated CRDs, and so that clients
// (tests, tools) can write v2beta1 manifests.
//
// +kubebuilder:object:generate=true
// +groupName=kyverno.io
package v2beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: "kyverno.io", Version: "v2beta1"}

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ClusterPolicy{}, &ClusterPolicyList{},
		&Policy{}, &PolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
