package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

func knownTypes() []runtime.Object {
	return []runtime.Object{
		&PolicyException{}, &PolicyExceptionList{},
		&AdmissionReport{}, &AdmissionReportList{},
		&ClusterAdmissionReport{}, &ClusterAdmissionReportList{},
		&BackgroundScanReport{}, &BackgroundScanReportList{},
		&ClusterBackgroundScanReport{}, &ClusterBackgroundScanReportList{},
	}
}

// ReportSpec is the body of every intermediate report: the results for one
// resource, and their summary.
type ReportSpec struct {
	// Owner is the resource the results are about.
	Owner   metav1.OwnerReference           `json:"owner"`
	Summary wgv1alpha2.PolicyReportSummary  `json:"summary,omitempty"`
	Results []wgv1alpha2.PolicyReportResult `json:"results,omitempty"`
}

// AdmissionReport holds the results of one resource (Namespaced scope).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=admr,categories=kyverno
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".spec.owner.kind"
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".spec.owner.name"
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".spec.summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".spec.summary.fail"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:storageversion
type AdmissionReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ReportSpec `json:"spec"`
}

// AdmissionReportList is a list of AdmissionReports.
//
// +kubebuilder:object:root=true
type AdmissionReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdmissionReport `json:"items"`
}

// ClusterAdmissionReport holds the results of one resource (Cluster scope).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cadmr,categories=kyverno
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".spec.owner.kind"
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".spec.owner.name"
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".spec.summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".spec.summary.fail"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:storageversion
type ClusterAdmissionReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ReportSpec `json:"spec"`
}

// ClusterAdmissionReportList is a list of ClusterAdmissionReports.
//
// +kubebuilder:object:root=true
type ClusterAdmissionReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterAdmissionReport `json:"items"`
}

// BackgroundScanReport holds the results of one resource (Namespaced scope).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=bgscanr,categories=kyverno
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".spec.owner.kind"
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".spec.owner.name"
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".spec.summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".spec.summary.fail"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:storageversion
type BackgroundScanReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ReportSpec `json:"spec"`
}

// BackgroundScanReportList is a list of BackgroundScanReports.
//
// +kubebuilder:object:root=true
type BackgroundScanReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackgroundScanReport `json:"items"`
}

// ClusterBackgroundScanReport holds the results of one resource (Cluster scope).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cbgscanr,categories=kyverno
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".spec.owner.kind"
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".spec.owner.name"
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".spec.summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".spec.summary.fail"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:storageversion
type ClusterBackgroundScanReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ReportSpec `json:"spec"`
}

// ClusterBackgroundScanReportList is a list of ClusterBackgroundScanReports.
//
// +kubebuilder:object:root=true
type ClusterBackgroundScanReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterBackgroundScanReport `json:"items"`
}
