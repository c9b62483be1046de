package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

// PolicyExceptionSpec exempts matching resources from some rules of some policies.
type PolicyExceptionSpec struct {
	// Background says whether the exception applies in background scans (default true).
	Background *bool `json:"background,omitempty"`
	// Match selects the exempted resources (any/all of resource filters).
	Match kyvernov1.MatchResources `json:"match"`
	// Conditions further restrict when the exception applies.
	Conditions *kyvernov1.AnyAllConditions `json:"conditions,omitempty"`
	// Exceptions name the policies and rules exempted.
	Exceptions []Exception `json:"exceptions"`
	// PodSecurity exempts controls of podSecurity rules instead of whole rules.
	PodSecurity []kyvernov1.PodSecurityStandard `json:"podSecurity,omitempty"`
}

// BackgroundEnabled reports whether the exception applies in background scans.
func (s *PolicyExceptionSpec) BackgroundEnabled() bool { return s.Background == nil || *s.Background }

// Exception names one policy ("<name>" or "<namespace>/<name>") and its exempted rules.
type Exception struct {
	PolicyName string   `json:"policyName"`
	RuleNames  []string `json:"ruleNames"`
}

// PolicyException exempts resources from policy rules.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=polex,categories=kyverno
// +kubebuilder:storageversion
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
