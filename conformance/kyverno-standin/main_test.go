package main

import (
	"maps"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/admission"
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

func TestReportedKeepsClassicResultsOnly(t *testing.T) {
	s := &standin{background: map[string]bool{}, deny: map[string]bool{}}
	for name, actions := range map[string][]any{"deny": {"Deny"}, "audit": {"Audit"}} {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"validationActions": actions}}}
		u.SetName(name)
		s.remember(gvrValidatingPolicy, u)
	}
	classic := wgv1alpha2.PolicyReportResult{Policy: "require-team", Rule: "r", Result: wgv1alpha2.ResultFail, Source: "kyverno"}
	vp := func(name string) wgv1alpha2.PolicyReportResult {
		return wgv1alpha2.PolicyReportResult{Policy: name, Result: wgv1alpha2.ResultPass, Source: engine.SourceValidatingPolicy}
	}
	labels := map[string]string{"cpol.kyverno.io/require-team": "1", "vpol.kyverno.io/deny": "2", "vpol.kyverno.io/audit": "3"}

	tests := map[string]struct {
		results      []wgv1alpha2.PolicyReportResult
		want         []string
		wantLabels   []string
		wantWithheld bool
	}{
		"without a Deny policy, everything": {
			[]wgv1alpha2.PolicyReportResult{classic, vp("audit")}, []string{"require-team", "audit"},
			[]string{"cpol.kyverno.io/require-team", "vpol.kyverno.io/audit", "vpol.kyverno.io/deny"}, false,
		},
		"with one, the classic results alone": {
			[]wgv1alpha2.PolicyReportResult{classic, vp("audit"), vp("deny")}, []string{"require-team"},
			[]string{"cpol.kyverno.io/require-team"}, true,
		},
		"with one and CEL policies alone, nothing": {
			[]wgv1alpha2.PolicyReportResult{vp("audit"), vp("deny")}, nil, []string{"cpol.kyverno.io/require-team"}, true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := admission.Admitted{Results: tc.results, PolicyLabels: labels}
			got, gotLabels, withheld := s.reported(a)
			var policies []string
			for _, r := range got {
				policies = append(policies, r.Policy)
			}
			if !slices.Equal(policies, tc.want) || withheld != tc.wantWithheld {
				t.Errorf("reported %v (withheld %v), want %v (withheld %v)", policies, withheld, tc.want, tc.wantWithheld)
			}
			if keys := slices.Sorted(maps.Keys(gotLabels)); !slices.Equal(keys, tc.wantLabels) {
				t.Errorf("policy labels %v, want %v", keys, tc.wantLabels)
			}
			if len(a.PolicyLabels) != 3 || len(a.Results) != len(tc.results) {
				t.Error("the request's own results and labels were changed")
			}
		})
	}
}
