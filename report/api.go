package report

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// API is the API final reports are written in: the policy working group's
// wgpolicyk8s.io/v1alpha2 PolicyReport and ClusterPolicyReport (the
// default, what `kubectl get polr` reads), or openreports.io/v1alpha1
// Report and ClusterReport, which Kyverno 1.15 and later can write. Both
// have the same results, summary and scope.
type API string

// The report APIs.
const (
	APIWGPolicy    API = "wgpolicyk8s"
	APIOpenReports API = "openreports"
)

// OpenReportsGroupVersion is the group and version of the OpenReports API.
var OpenReportsGroupVersion = schema.GroupVersion{Group: "openreports.io", Version: "v1alpha1"}

// ParseAPI reads a --report-api value ("" is the default, wgpolicyk8s).
func ParseAPI(s string) (API, error) {
	switch API(s) {
	case "", APIWGPolicy:
		return APIWGPolicy, nil
	case APIOpenReports:
		return APIOpenReports, nil
	}
	return "", fmt.Errorf("report API %q: want %s or %s", s, APIWGPolicy, APIOpenReports)
}

// GroupVersion is the API's group and version.
func (a API) GroupVersion() schema.GroupVersion {
	if a == APIOpenReports {
		return OpenReportsGroupVersion
	}
	return wgv1alpha2.GroupVersion
}

// Kinds are the kinds of a namespaced and of a cluster-scoped final report.
func (a API) Kinds() (namespaced, cluster string) {
	if a == APIOpenReports {
		return "Report", "ClusterReport"
	}
	return "PolicyReport", "ClusterPolicyReport"
}

// FinalGVRs are the resources of namespaced and cluster-scoped final reports.
func (a API) FinalGVRs() (namespaced, cluster schema.GroupVersionResource) {
	gv := a.GroupVersion()
	if a == APIOpenReports {
		return gv.WithResource("reports"), gv.WithResource("clusterreports")
	}
	return gv.WithResource("policyreports"), gv.WithResource("clusterpolicyreports")
}

// FinalGVR is the resource of the final report of a resource in namespace
// ("" for a cluster-scoped resource).
func (a API) FinalGVR(namespace string) schema.GroupVersionResource {
	ns, cluster := a.FinalGVRs()
	if namespace == "" {
		return cluster
	}
	return ns
}

// TypeMeta is the apiVersion and kind of the final report of a resource in
// namespace.
func (a API) TypeMeta(namespace string) (apiVersion, kind string) {
	ns, cluster := a.Kinds()
	if namespace == "" {
		return a.GroupVersion().String(), cluster
	}
	return a.GroupVersion().String(), ns
}
