package merge

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// resourceState is what the merger keeps of one resource: its identity and
// the results of its intermediate reports, nothing of the report objects
// themselves.
type resourceState struct {
	subject    report.Subject
	admission  reportPart
	background reportPart
	// updated is when an intermediate report of the resource last changed;
	// checked when the orphan check last found the resource alive.
	updated, checked time.Time
}

// reportPart is one intermediate report of a resource.
type reportPart struct {
	present bool
	results []wgv1alpha2.PolicyReportResult
	hash    string // audit.kyverno.io/resource.hash
	ref     reportRef
}

// reportRef locates an intermediate report, for the orphan check.
type reportRef struct {
	gvr             schema.GroupVersionResource
	namespace, name string
	uid             types.UID
	resourceVersion string
	gvrLabel        string // audit.kyverno.io/resource.gvr
	owned           bool   // has an ownerReference to its resource
}

// intern returns the one copy of s the merger keeps. Callers hold m.mu.
func (m *Merger) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := m.strings[s]; ok {
		return v
	}
	m.strings[s] = s
	return s
}

// compact makes results share their repeated strings and property maps with
// every other resource's: 10,000 reports of the same policies hold a few
// hundred distinct policy names, rules, messages and categories. Callers
// hold m.mu.
func (m *Merger) compact(results []wgv1alpha2.PolicyReportResult) []wgv1alpha2.PolicyReportResult {
	if len(results) == 0 {
		return nil
	}
	out := make([]wgv1alpha2.PolicyReportResult, len(results))
	for i, r := range results {
		r.Source = m.intern(r.Source)
		r.Policy = m.intern(r.Policy)
		r.Rule = m.intern(r.Rule)
		r.Category = m.intern(r.Category)
		r.Severity = wgv1alpha2.Severity(m.intern(string(r.Severity)))
		r.Result = wgv1alpha2.Result(m.intern(string(r.Result)))
		r.Message = m.intern(r.Message)
		if len(r.Properties) == 1 {
			for k, v := range r.Properties {
				key := k + "\x00" + v
				shared, ok := m.props[key]
				if !ok {
					shared = map[string]string{m.intern(k): m.intern(v)}
					m.props[key] = shared
				}
				r.Properties = shared // never modified: Merge copies results by value only
			}
		}
		out[i] = r
	}
	return out
}
