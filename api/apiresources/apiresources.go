// Package apiresources is the one table of the API resources tally reads
// and writes, and the key by which the controllers name a policy.
package apiresources

import (
	"slices"

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

// VAPKeyPrefix starts the key of a ValidatingAdmissionPolicy, MAPKeyPrefix
// of a MutatingAdmissionPolicy.
const (
	VAPKeyPrefix = "ValidatingAdmissionPolicy/"
	MAPKeyPrefix = "MutatingAdmissionPolicy/"
)

// PolicyKey is a policy's key in every controller: its report name for a
// ClusterPolicy ("name") or Policy ("namespace/name"); for the other kinds
// their kind and report name ("ValidatingPolicy/x",
// "NamespacedValidatingPolicy/ns/x", "ValidatingAdmissionPolicy/x"). A
// namespace is never capitalized, so no key of one kind is another's.
func PolicyKey(gvr schema.GroupVersionResource, namespace, name string) string {
	switch gvr {
	case Policy:
		return namespace + "/" + name
	case ValidatingPolicy:
		return policiesv1.KindValidatingPolicy + "/" + name
	case NamespacedValidatingPolicy:
		return policiesv1.KindNamespacedValidatingPolicy + "/" + namespace + "/" + name
	case MutatingPolicy:
		return policiesv1.KindMutatingPolicy + "/" + name
	case NamespacedMutatingPolicy:
		return policiesv1.KindNamespacedMutatingPolicy + "/" + namespace + "/" + name
	case ImageValidatingPolicy:
		return policiesv1.KindImageValidatingPolicy + "/" + name
	case NamespacedImageValidatingPolicy:
		return policiesv1.KindNamespacedImageValidatingPolicy + "/" + namespace + "/" + name
	case ValidatingAdmissionPolicy:
		return VAPKeyPrefix + name
	case MutatingAdmissionPolicy:
		return MAPKeyPrefix + name
	}
	return name
}

// CELPolicies are the policies.kyverno.io policy kinds tally evaluates:
// ValidatingPolicies, MutatingPolicies (the latter in background scans
// only, R44) and ImageValidatingPolicies (R42), cluster-wide and namespaced.
var CELPolicies = []schema.GroupVersionResource{ValidatingPolicy, NamespacedValidatingPolicy, MutatingPolicy, NamespacedMutatingPolicy,
	ImageValidatingPolicy, NamespacedImageValidatingPolicy}

// IsCELPolicy reports whether gvr is one of CELPolicies.
func IsCELPolicy(gvr schema.GroupVersionResource) bool {
	return slices.Contains(CELPolicies, gvr)
}

// IsNamespacedCELPolicy reports whether gvr is a namespaced one of
// CELPolicies.
func IsNamespacedCELPolicy(gvr schema.GroupVersionResource) bool {
	return gvr == NamespacedValidatingPolicy || gvr == NamespacedMutatingPolicy || gvr == NamespacedImageValidatingPolicy
}

// KyvernoOnlyPolicy is a policies.kyverno.io kind that Kyverno evaluates
// and tally does not (R45, R46): served where Kyverno's CRDs are installed.
type KyvernoOnlyPolicy struct {
	// Resource and Kind name the kind; Source is the source of its
	// results in Kyverno's reports.
	Resource, Kind, Source string
	Namespaced             bool
	// NotReported says what tally's background scan does not report of it.
	NotReported string
}

// KyvernoOnlyPolicies are those kinds.
var KyvernoOnlyPolicies = []KyvernoOnlyPolicy{
	{"generatingpolicies", "GeneratingPolicy", policiesv1.SourceGeneratingPolicy, false, generatingNotReported},
	{"namespacedgeneratingpolicies", "NamespacedGeneratingPolicy", policiesv1.SourceGeneratingPolicy, true, generatingNotReported},
}

const generatingNotReported = "nothing of its own (Kyverno's background controller reports it; tally merges those reports)"

// IsKyvernoOnlySource says whether a result's source is one of
// KyvernoOnlyPolicies': only Kyverno's controllers report it.
func IsKyvernoOnlySource(source string) bool {
	for _, k := range KyvernoOnlyPolicies {
		if k.Source == source {
			return true
		}
	}
	return false
}

// KyvernoOnlyVersions are the versions of policies.kyverno.io in which
// those kinds are looked for, newest first: each is read in the first that
// serves it.
var KyvernoOnlyVersions = []string{"v1", "v1beta1", "v1alpha1"}

// KyvernoOnlyPolicyOf finds gvr's kind among KyvernoOnlyPolicies.
func KyvernoOnlyPolicyOf(gvr schema.GroupVersionResource) (KyvernoOnlyPolicy, bool) {
	if gvr.Group != policiesv1.GroupVersion.Group {
		return KyvernoOnlyPolicy{}, false
	}
	for _, k := range KyvernoOnlyPolicies {
		if k.Resource == gvr.Resource {
			return k, true
		}
	}
	return KyvernoOnlyPolicy{}, false
}
