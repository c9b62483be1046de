package tester

// clusterScoped are the kinds Kubernetes (and the policy engines' own
// APIs) serve cluster-wide. Offline there is no discovery to ask; every
// other kind is taken as namespaced, as Kyverno's CLI takes it.
var clusterScoped = map[string]bool{
	"APIService": true, "CertificateSigningRequest": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ComponentStatus": true, "CSIDriver": true, "CSINode": true, "CustomResourceDefinition": true,
	"FlowSchema": true, "IngressClass": true, "MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
	"MutatingWebhookConfiguration": true, "Namespace": true, "Node": true, "PersistentVolume": true,
	"PodSecurityPolicy": true, "PriorityClass": true, "PriorityLevelConfiguration": true, "RuntimeClass": true,
	"SelfSubjectAccessReview": true, "SelfSubjectReview": true, "StorageClass": true, "SubjectAccessReview": true,
	"TokenReview": true, "ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"ValidatingWebhookConfiguration": true, "VolumeAttachment": true, "IPAddress": true, "ServiceCIDR": true,
	"DeviceClass": true, "VolumeAttributesClass": true,
	"ClusterPolicy": true, "ClusterPolicyReport": true, "ClusterEphemeralReport": true, "ClusterCleanupPolicy": true,
	"ValidatingPolicy": true, "ImageValidatingPolicy": true, "MutatingPolicy": true, "GeneratingPolicy": true,
	"DeletingPolicy": true, "GlobalContextEntry": true, "ClusterIssuer": true,
}

// defaultNamespace puts a namespaced resource that names no namespace in
// "default", as Kyverno's CLI and an API server would; the manifest read
// from the file is not modified.
func defaultNamespace(obj map[string]any) map[string]any {
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	if clusterScoped[kind] || md == nil {
		return obj
	}
	if ns, _ := md["namespace"].(string); ns != "" {
		return obj
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	meta := make(map[string]any, len(md)+1)
	for k, v := range md {
		meta[k] = v
	}
	meta["namespace"] = "default"
	out["metadata"] = meta
	return out
}
