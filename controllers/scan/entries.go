package scan

import (
	"encoding/json"
	"maps"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// The store keeps each result as an interned memstore.Entry and a time;
// reports carry wgpolicyk8s entries. These convert between the two, both
// ways exactly, so that results read back from reports at start-up compare
// equal to freshly evaluated ones.

// storedResult makes a store result of a report entry (its timestamp is
// when it changed).
func storedResult(r wgv1alpha2.PolicyReportResult) memstore.Result {
	return memstore.NewResult(memstore.Entry{
		Policy: r.Policy, Rule: r.Rule, Result: string(r.Result), Message: r.Message,
		Category: r.Category, Severity: string(r.Severity), Source: r.Source, Scored: r.Scored,
		Properties: encodeProperties(r.Properties),
	}, time.Unix(r.Timestamp.Seconds, int64(r.Timestamp.Nanos)))
}

// slim drops from a background result what the merger derives again: the
// category, severity and scored (the policy's annotations) and the process
// property (every result of a BackgroundScanReport is a background scan's).
// Fewer bytes for the API server to store, decode and keep in its watch
// cache.
func slim(r wgv1alpha2.PolicyReportResult) wgv1alpha2.PolicyReportResult {
	r.Category, r.Severity, r.Scored = "", "", false
	if r.Properties[report.PropertyProcess] == report.ProcessBackground {
		if len(r.Properties) == 1 {
			r.Properties = nil
		} else {
			p := maps.Clone(r.Properties) // shared: never modified
			delete(p, report.PropertyProcess)
			r.Properties = p
		}
	}
	return r
}

// reportResult makes the report entry of a store result. Its Properties map
// may be shared: never modify it.
func reportResult(r memstore.Result) wgv1alpha2.PolicyReportResult {
	e := r.Value()
	at := r.ChangedAt()
	return wgv1alpha2.PolicyReportResult{
		Source: e.Source, Policy: e.Policy, Rule: e.Rule, Category: e.Category, Severity: wgv1alpha2.Severity(e.Severity),
		Timestamp: metav1.Timestamp{Seconds: at.Unix(), Nanos: int32(at.Nanosecond())},
		Result:    wgv1alpha2.Result(e.Result), Scored: e.Scored, Message: e.Message,
		Properties: decodeProperties(e.Properties),
	}
}

// encodeProperties is the canonical form of a properties map: JSON with
// sorted keys ("" for none).
func encodeProperties(p map[string]string) string {
	if len(p) == 0 {
		return ""
	}
	data, _ := json.Marshal(p) // a map of strings: cannot fail
	return string(data)
}

// propertyMaps shares decoded properties maps: a few distinct ones serve
// every result. Bounded: past its size, maps are decoded each time.
var propertyMaps struct {
	sync.Mutex
	m map[string]map[string]string
}

func decodeProperties(s string) map[string]string {
	if s == "" {
		return nil
	}
	propertyMaps.Lock()
	defer propertyMaps.Unlock()
	if m, ok := propertyMaps.m[s]; ok {
		return m
	}
	var m map[string]string
	if json.Unmarshal([]byte(s), &m) != nil {
		return nil // written by encodeProperties: cannot happen
	}
	if propertyMaps.m == nil {
		propertyMaps.m = map[string]map[string]string{}
	}
	if len(propertyMaps.m) < 1024 {
		propertyMaps.m[s] = m
	}
	return m
}

// backgroundEntry is a result as a BackgroundScanReport holds it: no
// timestamp (the times are one annotation, report.AnnotationChangedAt) and
// no scored (the merger takes it from the policy). Category, severity and
// properties are written only when a result has them of its own (slim).
type backgroundEntry struct {
	Source     string            `json:"source,omitempty"`
	Policy     string            `json:"policy"`
	Rule       string            `json:"rule,omitempty"`
	Category   string            `json:"category,omitempty"`
	Severity   string            `json:"severity,omitempty"`
	Result     string            `json:"result,omitempty"`
	Message    string            `json:"message,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
}

// backgroundSpec is the spec of a BackgroundScanReport as the scanner writes it.
type backgroundSpec struct {
	Owner   metav1.OwnerReference          `json:"owner"`
	Results []backgroundEntry              `json:"results,omitempty"`
	Summary wgv1alpha2.PolicyReportSummary `json:"summary"`
}

// backgroundSpecOf makes the spec of a BackgroundScanReport holding entries
// (sorted) and the value of its report.AnnotationChangedAt.
func backgroundSpecOf(owner metav1.OwnerReference, entries []wgv1alpha2.PolicyReportResult) (backgroundSpec, string) {
	out := make([]backgroundEntry, len(entries))
	times := make([]metav1.Timestamp, len(entries))
	for i, e := range entries {
		out[i] = backgroundEntry{Source: e.Source, Policy: e.Policy, Rule: e.Rule, Category: e.Category, Severity: string(e.Severity),
			Result: string(e.Result), Message: e.Message, Properties: e.Properties}
		times[i] = e.Timestamp
	}
	return backgroundSpec{Owner: owner, Results: out, Summary: wgv1alpha2.SummaryOf(entries)}, report.EncodeChangedAt(times)
}
