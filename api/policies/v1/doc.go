// Package v1 holds the policies.kyverno.io kinds tally reads: ValidatingPolicy,
// NamespacedValidatingPolicy and the CEL PolicyException. Kyverno serves them
// as v1alpha1, v1beta1 and v1 with one spec; tally reads every version into
// these types. They are decoded from manifests (the CLI) so far; CRDs and the
// scanner's watches come with background scanning of CEL policies.
// +kubebuilder:skip
package v1

// Group is the API group of these kinds.
const Group = "policies.kyverno.io"
