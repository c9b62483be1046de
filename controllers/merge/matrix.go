package merge

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// PolicyInfo is what the merge needs to know of a current policy.
type PolicyInfo struct {
	// Background and Admission are the policy's spec.background and
	// spec.admission (both default true).
	Background, Admission bool
	// Rules are the names of its current validate rules (autogen included).
	Rules map[string]bool
	// KyvernoOnly are the names of its rules tally does not evaluate
	// (mutate, generate; autogen names included): beside
	// Kyverno their results come from Kyverno's controllers alone, through
	// its admission reports, and stay while the rule does (R45); tally's
	// background scan never reports them, so it never makes them stale.
	KyvernoOnly map[string]bool
	// OtherHandler are the names of its verifyImages rules (autogen
	// included): tally scans them, and beside Kyverno its webhook reports
	// them from another handler than the validate rules' (as KyvernoOnly's).
	OtherHandler map[string]bool
	// AnyRule is set for CEL policies: their results carry no rule of the
	// policy's own ("", exception, evaluation, match).
	AnyRule bool
	// ReportsDisabled is set by the label reports.kyverno.io/disabled: "true" (R27).
	ReportsDisabled bool
	// Scored is false for policies annotated policies.kyverno.io/scored: "false" (R24).
	Scored bool
	// Category and Severity are the policy's annotations: results that do
	// not carry them (the scanner's leave them out) get them.
	Category, Severity string
}

// Filter limits what is reported (R27). Empty fields allow everything.
type Filter struct {
	// AllowedResults lists the result values to keep ("pass", "fail", ...).
	AllowedResults map[wgv1alpha2.Result]bool
}

// Input is everything known about one resource.
type Input struct {
	// Admission are the results of its AdmissionReport (CREATE/UPDATE requests).
	Admission []wgv1alpha2.PolicyReportResult
	// Background are the results of its BackgroundScanReport.
	Background []wgv1alpha2.PolicyReportResult
	// BackgroundCurrent says the background results were computed on the
	// resource's current content: then they also tell which rules still
	// match it, and an admission result for a rule the background scan no
	// longer reports is stale (R19).
	BackgroundCurrent bool
	// Policies are the current policies by report name.
	Policies map[string]PolicyInfo
	Filter   Filter
}

// PolicyKey is a policy's key in Input.Policies: its name for a classic
// policy (source kyverno), its source and name for a CEL policy, so that a
// ValidatingPolicy and a ClusterPolicy of the same name are told apart.
func PolicyKey(source, policy string) string {
	if source == "" || source == report.Source {
		return policy
	}
	return source + "\x00" + policy
}

// Merge computes the final results of a resource from its intermediate
// results, as a pure function:
//
//   - results of deleted policies or rules are dropped (R19);
//   - background results of policies with background off, and admission
//     results of policies with admission off, are dropped (R09, R10, R13, R19);
//   - an admission result for a rule that the current background scan of a
//     background policy no longer reports is dropped: the rule no longer
//     matches (R19);
//   - when admission and background both have a (policy, rule), the newer
//     wins; on a tie the background result, being a fresh evaluation of the
//     stored state, wins (R20);
//   - a fail of an unscored policy is reported as warn with scored false (R24);
//   - policies with reports disabled and filtered-out results are dropped (R27).
//
// The matrix cells R07-R10 follow: an Enforce failure never reaches an
// AdmissionReport (the request was denied, R11), so new resources report only
// passes for Enforce rules, while existing resources report whatever the
// background scan found when background is on.
func Merge(in Input) []wgv1alpha2.PolicyReportResult {
	chosen := make(map[wgv1alpha2.ResultKey]wgv1alpha2.PolicyReportResult, len(in.Background)+len(in.Admission))
	backgroundSeen := make(map[wgv1alpha2.ResultKey]bool, len(in.Background))
	for _, r := range in.Background {
		p, ok := in.Policies[PolicyKey(r.Source, r.Policy)]
		if !ok || !p.Background || !(p.AnyRule || p.Rules[r.Rule]) {
			continue
		}
		k := r.Key()
		backgroundSeen[k] = true
		chosen[k] = r
	}
	for _, r := range in.Admission {
		p, ok := in.Policies[PolicyKey(r.Source, r.Policy)]
		kyvernoOnly := ok && p.KyvernoOnly[r.Rule]
		if !ok || !p.Admission || !(p.AnyRule || p.Rules[r.Rule] || kyvernoOnly) {
			continue
		}
		k := r.Key()
		if p.Background && in.BackgroundCurrent && !backgroundSeen[k] && !kyvernoOnly {
			continue // the current background scan says the rule no longer applies
		}
		if prev, ok := chosen[k]; ok && !newer(r, prev) {
			continue
		}
		chosen[k] = r
	}
	out := make([]wgv1alpha2.PolicyReportResult, 0, len(chosen))
	for k, r := range chosen {
		p := in.Policies[PolicyKey(k.Source, k.Policy)]
		if p.ReportsDisabled {
			continue
		}
		r.Scored = p.Scored
		if r.Category == "" {
			r.Category = p.Category
		}
		if r.Severity == "" {
			r.Severity = wgv1alpha2.Severity(p.Severity)
		}
		if !p.Scored && r.Result == wgv1alpha2.ResultFail {
			r.Result = wgv1alpha2.ResultWarn
		}
		if len(in.Filter.AllowedResults) > 0 && !in.Filter.AllowedResults[r.Result] {
			continue
		}
		out = append(out, r)
	}
	report.Sort(out)
	return out
}

// newer reports whether a is strictly newer than b.
func newer(a, b wgv1alpha2.PolicyReportResult) bool { return after(a.Timestamp, b.Timestamp) }

// after reports whether timestamp a is strictly later than b.
func after(a, b metav1.Timestamp) bool {
	if a.Seconds != b.Seconds {
		return a.Seconds > b.Seconds
	}
	return a.Nanos > b.Nanos
}
