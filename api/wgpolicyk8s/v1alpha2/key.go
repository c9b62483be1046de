package v1alpha2

// ResultKey is what tells one result of a resource from another: its
// source, policy and rule (a ValidatingPolicy and a MutatingPolicy of one
// name have the same policy and no rule; a ClusterPolicy may share a CEL
// policy's name). The scanner's store, its Events, the merge and the fold
// of Kyverno's reports key results by it.
//
// +kubebuilder:object:generate=false
type ResultKey struct{ Source, Policy, Rule string }

// Key is the result's ResultKey.
func (r *PolicyReportResult) Key() ResultKey {
	return ResultKey{Source: r.Source, Policy: r.Policy, Rule: r.Rule}
}
