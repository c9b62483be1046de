package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// gvrEphemeralReports are the reports Kyverno's admission controller writes.
// labelResourceUID names the resource of an intermediate report.
const labelResourceUID = "audit.kyverno.io/resource.uid"

var gvrEphemeralReports = schema.GroupVersionResource{Group: "reports.kyverno.io", Version: "v1", Resource: "ephemeralreports"}

// intermediateKinds are the kinds of intermediate reports, none of which
// outlives its merge (R20).
var intermediateKinds = []schema.GroupVersionResource{
	gvrEphemeralReports,
	{Group: "reports.kyverno.io", Version: "v1", Resource: "clusterephemeralreports"},
	{Group: "kyverno.io", Version: "v2", Resource: "admissionreports"},
	{Group: "kyverno.io", Version: "v2", Resource: "clusteradmissionreports"},
	{Group: "kyverno.io", Version: "v2", Resource: "backgroundscanreports"},
	{Group: "kyverno.io", Version: "v2", Resource: "clusterbackgroundscanreports"},
}

// reportKinds are the report kinds whose objects are counted at the end of
// a run, by resource name.
var reportKinds = append(slices.Clone(intermediateKinds), []schema.GroupVersionResource{
	{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"},
	{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "clusterpolicyreports"},
	{Group: "openreports.io", Version: "v1alpha1", Resource: "reports"},
	{Group: "openreports.io", Version: "v1alpha1", Resource: "clusterreports"},
}...)

// ReportCounts counts the report objects of the cluster, by resource (a
// kind the cluster does not serve is left out), and names up to five of
// each kind.
func ReportCounts(ctx context.Context, cfg *rest.Config) (map[string]int, map[string][]string, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	out, names := map[string]int{}, map[string][]string{}
	for _, gvr := range reportKinds {
		list, err := client.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue // not served here
		}
		out[gvr.Resource] = len(list.Items)
		for i, u := range list.Items {
			if i == 5 {
				break
			}
			owner, _, _ := unstructured.NestedString(u.Object, "spec", "owner", "name")
			kind, _, _ := unstructured.NestedString(u.Object, "spec", "owner", "kind")
			names[gvr.Resource] = append(names[gvr.Resource], fmt.Sprintf("%s/%s (%s %s)", u.GetNamespace(), u.GetName(), kind, owner))
		}
	}
	return out, names, nil
}

// FormatCounts renders counts in a stable order.
func FormatCounts(counts map[string]int) string {
	var parts []string
	for _, gvr := range reportKinds {
		if n, ok := counts[gvr.Resource]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", gvr.Resource, n))
		}
	}
	return strings.Join(slices.Clip(parts), " ")
}

// CheckNoLeftovers waits up to timeout for the cluster to hold no report
// object at all (every case deletes what it made), and fails if an
// EphemeralReport is still there: beside Kyverno, tally folds and deletes every one
// Kyverno's admission controller writes (a Kyverno report left over would
// pile up without Kyverno's reports controller). It returns the last counts.
func CheckNoLeftovers(ctx context.Context, cfg *rest.Config, timeout time.Duration) (map[string]int, map[string][]string, error) {
	var counts map[string]int
	var names map[string][]string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		c, n, err := ReportCounts(ctx, cfg)
		if err != nil {
			return false, err
		}
		counts, names = c, n
		for _, v := range c {
			if v != 0 {
				return false, nil
			}
		}
		return true, nil // the cases' namespaces are gone, and everything with them
	})
	if err != nil && counts["ephemeralreports"] == 0 && counts["clusterephemeralreports"] == 0 {
		err = nil // reports of tally's own still going with a terminating namespace: not a leftover of Kyverno's
	}
	if err != nil {
		return counts, names, fmt.Errorf("EphemeralReports left over after %s (%s): %w", timeout, FormatCounts(counts), err)
	}
	return counts, names, nil
}
