// Package apiresources is the one table of the API resources tally reads
// and writes. What the controllers know of each policy kind (its key, its
// report source, how it is compiled) is controllers/catalog's table.
package apiresources

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	reportsv1 "github.com/tally-dev/tally/api/reports/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// Policies, exceptions and what they match on.
var (
	ClusterPolicy              = kyvernov1.GroupVersion.WithResource("clusterpolicies")
	Policy                     = kyvernov1.GroupVersion.WithResource("policies")
	PolicyException            = kyvernov2.GroupVersion.WithResource("policyexceptions")
	ValidatingPolicy           = policiesv1.GroupVersion.WithResource("validatingpolicies")
	NamespacedValidatingPolicy = policiesv1.GroupVersion.WithResource("namespacedvalidatingpolicies")
	MutatingPolicy             = policiesv1.GroupVersion.WithResource("mutatingpolicies")
	NamespacedMutatingPolicy   = policiesv1.GroupVersion.WithResource("namespacedmutatingpolicies")
	// ImageValidatingPolicy and NamespacedImageValidatingPolicy (R42).
	ImageValidatingPolicy           = policiesv1.GroupVersion.WithResource("imagevalidatingpolicies")
	NamespacedImageValidatingPolicy = policiesv1.GroupVersion.WithResource("namespacedimagevalidatingpolicies")
	// CELPolicyException is policies.kyverno.io's PolicyException.
	CELPolicyException               = policiesv1.GroupVersion.WithResource("policyexceptions")
	ValidatingAdmissionPolicy        = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies")
	ValidatingAdmissionPolicyBinding = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings")
	ValidatingWebhookConfiguration   = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations")
	// MutatingAdmissionPolicy and its binding are served as v1beta1 by
	// Kubernetes 1.34+ when turned on.
	MutatingAdmissionPolicy        = admissionregistrationv1beta1.SchemeGroupVersion.WithResource("mutatingadmissionpolicies")
	MutatingAdmissionPolicyBinding = admissionregistrationv1beta1.SchemeGroupVersion.WithResource("mutatingadmissionpolicybindings")
	Namespace                      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	// ConfigMap is what configMap context entries read, and where the
	// scanner keeps its scan state.
	ConfigMap = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	// Lease is where the scanner pairs hold their membership (shard).
	Lease = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// Reports: intermediate (kyverno.io, reports.kyverno.io) and final.
var (
	AdmissionReport             = kyvernov2.GroupVersion.WithResource("admissionreports")
	ClusterAdmissionReport      = kyvernov2.GroupVersion.WithResource("clusteradmissionreports")
	BackgroundScanReport        = kyvernov2.GroupVersion.WithResource("backgroundscanreports")
	ClusterBackgroundScanReport = kyvernov2.GroupVersion.WithResource("clusterbackgroundscanreports")
	EphemeralReport             = reportsv1.GroupVersion.WithResource("ephemeralreports")
	ClusterEphemeralReport      = reportsv1.GroupVersion.WithResource("clusterephemeralreports")
	PolicyReport                = wgv1alpha2.GroupVersion.WithResource("policyreports")
	ClusterPolicyReport         = wgv1alpha2.GroupVersion.WithResource("clusterpolicyreports")
)
