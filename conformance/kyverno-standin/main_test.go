package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
)

func TestDeniedBy(t *testing.T) {
	s := &standin{background: map[string]bool{}, deny: map[string]bool{}}
	load := func(gvr schema.GroupVersionResource, namespace, name string, actions ...any) {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"validationActions": actions}}}
		u.SetNamespace(namespace)
		u.SetName(name)
		s.remember(gvr, u)
	}
	load(gvrValidatingPolicy, "", "deny", "Deny")
	load(gvrValidatingPolicy, "", "deny-audit", "Deny", "Audit")
	load(gvrValidatingPolicy, "", "warn", "Warn")
	load(gvrNamespacedValidatingPolicy, "ns", "deny", "Deny")
	load(gvrNamespacedValidatingPolicy, "ns", "audit", "Audit")
	load(gvrValidatingPolicy, "", "was-deny", "Deny")
	load(gvrValidatingPolicy, "", "was-deny", "Audit") // updated: denies no more

	cel := func(policy string) wgv1alpha2.PolicyReportResult {
		return wgv1alpha2.PolicyReportResult{Policy: policy, Result: wgv1alpha2.ResultPass, Source: engine.SourceValidatingPolicy}
	}
	tests := map[string]struct {
		results []wgv1alpha2.PolicyReportResult
		want    bool
	}{
		"a passing Deny policy withholds the others' results":     {[]wgv1alpha2.PolicyReportResult{cel("warn"), cel("deny")}, true},
		"Deny beside Audit in one policy withholds them too":      {[]wgv1alpha2.PolicyReportResult{cel("deny-audit")}, true},
		"a namespaced Deny policy counts, by its namespaced name": {[]wgv1alpha2.PolicyReportResult{cel("ns/deny")}, true},
		"Warn and Audit policies alone are reported":              {[]wgv1alpha2.PolicyReportResult{cel("warn"), cel("ns/audit")}, false},
		"a policy updated to drop Deny is reported":               {[]wgv1alpha2.PolicyReportResult{cel("was-deny")}, false},
		"a classic policy named as a Deny policy is not one":      {[]wgv1alpha2.PolicyReportResult{{Policy: "deny", Source: "kyverno"}}, false},
		"a cluster-wide name does not stand for a namespaced one": {[]wgv1alpha2.PolicyReportResult{cel("audit")}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := s.deniedBy(tc.results); got != tc.want {
				t.Errorf("deniedBy = %v, want %v", got, tc.want)
			}
		})
	}
}
