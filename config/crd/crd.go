// Package crd embeds the policy CRDs that controller-gen generates into
// bases/ (`make generate`), so that tally can check policies against the
// same OpenAPI schemas the API server applies. The YAML files are the
// generated ones, never copies: regenerating them changes what is embedded.
package crd

import _ "embed"

// ClusterPolicies is the kyverno.io ClusterPolicy CRD.
//
//go:embed bases/kyverno.io_clusterpolicies.yaml
var ClusterPolicies []byte

// Policies is the kyverno.io Policy CRD.
//
//go:embed bases/kyverno.io_policies.yaml
var Policies []byte

// The policies.kyverno.io policy CRDs, by kind.
var (
	//go:embed bases/policies.kyverno.io_validatingpolicies.yaml
	ValidatingPolicies []byte
	//go:embed bases/policies.kyverno.io_namespacedvalidatingpolicies.yaml
	NamespacedValidatingPolicies []byte
	//go:embed bases/policies.kyverno.io_mutatingpolicies.yaml
	MutatingPolicies []byte
	//go:embed bases/policies.kyverno.io_namespacedmutatingpolicies.yaml
	NamespacedMutatingPolicies []byte
	//go:embed bases/policies.kyverno.io_imagevalidatingpolicies.yaml
	ImageValidatingPolicies []byte
	//go:embed bases/policies.kyverno.io_namespacedimagevalidatingpolicies.yaml
	NamespacedImageValidatingPolicies []byte
)
