package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Result is the outcome of one rule for one resource.
// +kubebuilder:validation:Enum=pass;fail;warn;error;skip
type Result string

// The result values, ordered here by severity for readers; see Severity.
const (
	ResultPass  Result = "pass"
	ResultSkip  Result = "skip"
	ResultWarn  Result = "warn"
	ResultFail  Result = "fail"
	ResultError Result = "error"
)

// Severity is the severity a policy declares for its results.
// +kubebuilder:validation:Enum=critical;high;low;medium;info
type Severity string

// PolicyReportSummary counts results by value.
type PolicyReportSummary struct {
	Pass  int `json:"pass"`
	Fail  int `json:"fail"`
	Warn  int `json:"warn"`
	Error int `json:"error"`
	Skip  int `json:"skip"`
}

// Add counts one result.
func (s *PolicyReportSummary) Add(r Result) {
	switch r {
	case ResultPass:
		s.Pass++
	case ResultFail:
		s.Fail++
	case ResultWarn:
		s.Warn++
	case ResultError:
		s.Error++
	case ResultSkip:
		s.Skip++
	}
}

// SummaryOf counts the results of a list.
func SummaryOf(results []PolicyReportResult) PolicyReportSummary {
	var s PolicyReportSummary
	for i := range results {
		s.Add(results[i].Result)
	}
	return s
}

// PolicyReportResult is one entry of a report.
type PolicyReportResult struct {
	// Source is the engine that produced the result ("kyverno" for Kyverno policies).
	Source string `json:"source,omitempty"`
	// Policy is a ClusterPolicy's name or "<namespace>/<name>" of a Policy.
	Policy string `json:"policy"`
	Rule   string `json:"rule,omitempty"`
	// Category and Severity come from the policy's annotations.
	Category string   `json:"category,omitempty"`
	Severity Severity `json:"severity,omitempty"`
	// Timestamp is when the result last changed.
	Timestamp metav1.Timestamp `json:"timestamp,omitempty"`
	Result    Result           `json:"result,omitempty"`
	// Scored is false for policies annotated policies.kyverno.io/scored: "false".
	// It is always written (false included, R16/R24) but not required of others.
	// +optional
	Scored bool `json:"scored"`
	// Resources are the subjects of the result (empty when the report has a scope).
	Resources        []corev1.ObjectReference `json:"resources,omitempty"`
	ResourceSelector *metav1.LabelSelector    `json:"resourceSelector,omitempty"`
	Message          string                   `json:"message,omitempty"`
	Properties       map[string]string        `json:"properties,omitempty"`
}

// PolicyReport holds the results for namespaced resources.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=polr
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".scope.kind",priority=1
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".scope.name",priority=1
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".summary.fail"
// +kubebuilder:printcolumn:name="Warn",type=integer,JSONPath=".summary.warn"
// +kubebuilder:printcolumn:name="Error",type=integer,JSONPath=".summary.error"
// +kubebuilder:printcolumn:name="Skip",type=integer,JSONPath=".summary.skip"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type PolicyReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Scope is the resource the report is about.
	Scope         *corev1.ObjectReference `json:"scope,omitempty"`
	ScopeSelector *metav1.LabelSelector   `json:"scopeSelector,omitempty"`
	Summary       PolicyReportSummary     `json:"summary,omitempty"`
	Results       []PolicyReportResult    `json:"results,omitempty"`
}

// PolicyReportList is a list of PolicyReports.
//
// +kubebuilder:object:root=true
type PolicyReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicyReport `json:"items"`
}

// ClusterPolicyReport holds the results for cluster-scoped resources.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cpolr
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=".scope.kind",priority=1
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=".scope.name",priority=1
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=".summary.pass"
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=".summary.fail"
// +kubebuilder:printcolumn:name="Warn",type=integer,JSONPath=".summary.warn"
// +kubebuilder:printcolumn:name="Error",type=integer,JSONPath=".summary.error"
// +kubebuilder:printcolumn:name="Skip",type=integer,JSONPath=".summary.skip"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ClusterPolicyReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Scope             *corev1.ObjectReference `json:"scope,omitempty"`
	ScopeSelector     *metav1.LabelSelector   `json:"scopeSelector,omitempty"`
	Summary           PolicyReportSummary     `json:"summary,omitempty"`
	Results           []PolicyReportResult    `json:"results,omitempty"`
}

// ClusterPolicyReportList is a list of ClusterPolicyReports.
//
// +kubebuilder:object:root=true
type ClusterPolicyReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPolicyReport `json:"items"`
}
