// Package v1 contains reports.kyverno.io/v1 types tally reads: the
// EphemeralReport and ClusterEphemeralReport that Kyverno's admission
// controller (1.13 and later) writes for each admission request, which
// tally-merger folds into the final reports beside Kyverno
// (--ingest-kyverno-reports, controllers/merge fold.go), deleting each once
// merged.
//
// +kubebuilder:object:generate=true
// +groupName=reports.kyverno.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: "reports.kyverno.io", Version: "v1"}

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&EphemeralReport{}, &EphemeralReportList{},
		&ClusterEphemeralReport{}, &ClusterEphemeralReportList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
