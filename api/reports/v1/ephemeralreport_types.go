package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
)

// ReportSpec is the body of an ephemeral report: the results of one
// admission request for one resource. It has the shape of the kyverno.io
// intermediate reports.
type ReportSpec = kyvernov2.ReportSpec

// EphemeralReport holds the results of one admission request for a
// namespaced resource (Namespaced scope).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=ephr,categories=kyverno
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=".metadata.labels['audit\\.kyverno\\.io/source']"
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".spec.owner.kind"
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".spec.owner.name"
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".spec.summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".spec.summary.fail"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:storageversion
type EphemeralReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ReportSpec `json:"spec"`
}

// EphemeralReportList is a list of EphemeralReports.
//
// +kubebuilder:object:root=true
type EphemeralReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EphemeralReport `json:"items"`
}

// ClusterEphemeralReport holds the results of one admission request for a
// cluster-scoped resource (Cluster scope).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cephr,categories=kyverno
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=".metadata.labels['audit\\.kyverno\\.io/source']"
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".spec.owner.kind"
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".spec.owner.name"
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".spec.summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".spec.summary.fail"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:storageversion
type ClusterEphemeralReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ReportSpec `json:"spec"`
}

// ClusterEphemeralReportList is a list of ClusterEphemeralReports.
//
// +kubebuilder:object:root=true
type ClusterEphemeralReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterEphemeralReport `json:"items"`
}
