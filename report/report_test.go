package report

import (
	"testing"
	"time"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
)

func TestResultCarriesEveryDocumentedField(t *testing.T) {
	p := &engine.Policy{Name: "require-labels", Scored: true, Category: "Best Practices", Severity: "medium"}
	now := time.Unix(1700000000, 5)
	got := Result(p, engine.RuleResult{
		Policy: "require-labels", Rule: "check-team", Result: engine.Fail, Message: "m",
		Exceptions: []string{"ns/a", "ns/b"}, Properties: map[string]string{"owner": "platform"},
	}, ProcessBackground, now)
	want := map[string]string{"owner": "platform", "process": "background scan", "exceptions": "ns/a,ns/b"}
	if got.Source != "kyverno" || got.Policy != "require-labels" || got.Rule != "check-team" || got.Result != wgv1alpha2.ResultFail ||
		got.Category != "Best Practices" || got.Severity != "medium" || !got.Scored || got.Message != "m" ||
		got.Timestamp.Seconds != 1700000000 || got.Timestamp.Nanos != 5 {
		t.Errorf("unexpected result %+v", got)
	}
	for k, v := range want {
		if got.Properties[k] != v {
			t.Errorf("property %s = %q, want %q", k, got.Properties[k], v)
		}
	}
}

func TestFinalReport(t *testing.T) {
	results := func() []wgv1alpha2.PolicyReportResult {
		return []wgv1alpha2.PolicyReportResult{
			{Policy: "b", Rule: "r", Result: wgv1alpha2.ResultPass},
			{Policy: "a", Rule: "r2", Result: wgv1alpha2.ResultFail},
			{Policy: "a", Rule: "r1", Result: wgv1alpha2.ResultWarn},
		}
	}
	tests := map[string]struct {
		subject     Subject
		wantCluster bool
	}{
		"a namespaced resource gets a PolicyReport in its namespace": {
			subject: Subject{APIVersion: "v1", Kind: "Pod", Namespace: "shop", Name: "p", UID: "uid-1"},
		},
		"a cluster-scoped resource gets a ClusterPolicyReport": {
			subject:     Subject{APIVersion: "v1", Kind: "Namespace", Name: "shop", UID: "uid-2"},
			wantCluster: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			polr, cpolr := Final(tc.subject, results())
			if (cpolr != nil) != tc.wantCluster || (polr != nil) == tc.wantCluster {
				t.Fatalf("got polr=%v cpolr=%v, want cluster=%v", polr != nil, cpolr != nil, tc.wantCluster)
			}
			var meta = func() (string, string, []wgv1alpha2.PolicyReportResult, wgv1alpha2.PolicyReportSummary) {
				if polr != nil {
					return polr.Name, polr.Namespace, polr.Results, polr.Summary
				}
				return cpolr.Name, cpolr.Namespace, cpolr.Results, cpolr.Summary
			}
			name, ns, res, sum := meta()
			if name != string(tc.subject.UID) || ns != tc.subject.Namespace {
				t.Errorf("report %s/%s, want %s/%s", ns, name, tc.subject.Namespace, tc.subject.UID)
			}
			if res[0].Policy != "a" || res[0].Rule != "r1" || res[2].Policy != "b" {
				t.Errorf("results not sorted by policy and rule: %+v", res)
			}
			if sum != (wgv1alpha2.PolicyReportSummary{Pass: 1, Fail: 1, Warn: 1}) {
				t.Errorf("summary %+v does not count the results", sum)
			}
			m := Meta(tc.subject)
			if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != tc.subject.UID || m.Labels[LabelManagedBy] != ManagedBy {
				t.Errorf("metadata %+v lacks the owner reference or label", m)
			}
		})
	}
}
