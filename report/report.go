package report

import (
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
)

// Values of the `process` property and of labels tally sets.
const (
	Source            = "kyverno"
	PropertyProcess   = "process"
	ProcessBackground = "background scan"
	ProcessAdmission  = "admission review"
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	ManagedBy         = "tally"
)

// sharedProps are the properties of most results, shared (never modified)
// so that a store of 100,000 results does not hold 100,000 identical maps.
var sharedProps = map[string]map[string]string{
	ProcessBackground: {PropertyProcess: ProcessBackground},
	ProcessAdmission:  {PropertyProcess: ProcessAdmission},
}

// Result makes a report entry of an engine result. now is when the result
// was produced (the caller keeps the old timestamp when nothing changed).
// The entry's Properties map may be shared: never modify it.
func Result(p *engine.Policy, r engine.RuleResult, process string, now time.Time) wgv1alpha2.PolicyReportResult {
	props := sharedProps[process]
	if props == nil || len(r.Properties) > 0 || len(r.Exceptions) > 0 {
		props = make(map[string]string, len(r.Properties)+2)
		for k, v := range r.Properties {
			props[k] = v
		}
		props[PropertyProcess] = process
		if len(r.Exceptions) > 0 {
			props["exceptions"] = strings.Join(r.Exceptions, ",")
		}
	}
	source := Source
	if r.Source != "" {
		source = r.Source // a CEL policy's
	}
	return wgv1alpha2.PolicyReportResult{
		Source:     source,
		Policy:     r.Policy,
		Rule:       r.Rule,
		Category:   p.Category,
		Severity:   wgv1alpha2.Severity(p.Severity),
		Timestamp:  metav1.Timestamp{Seconds: now.Unix(), Nanos: int32(now.Nanosecond())},
		Result:     r.Result,
		Scored:     p.Scored,
		Message:    r.Message,
		Properties: props,
	}
}

// Sort orders entries by policy, then rule, so that equal sets compare equal.
func Sort(results []wgv1alpha2.PolicyReportResult) {
	sort.SliceStable(results, func(i, j int) bool {
		if results[i].Policy != results[j].Policy {
			return results[i].Policy < results[j].Policy
		}
		return results[i].Rule < results[j].Rule
	})
}

// Subject identifies the resource a report is about.
type Subject struct {
	APIVersion, Kind, Namespace, Name string
	UID                               types.UID
}

// SubjectOf reads a resource's identity from its JSON form.
func SubjectOf(obj map[string]any) Subject {
	md, _ := obj["metadata"].(map[string]any)
	s := Subject{}
	s.APIVersion, _ = obj["apiVersion"].(string)
	s.Kind, _ = obj["kind"].(string)
	s.Namespace, _ = md["namespace"].(string)
	s.Name, _ = md["name"].(string)
	uid, _ := md["uid"].(string)
	s.UID = types.UID(uid)
	return s
}

// Meta is the metadata of the final report of a subject: its name is the
// subject's UID, it is owned by the subject (so the garbage collector deletes
// it with the subject), and it carries tally's managed-by label.
func Meta(s Subject) metav1.ObjectMeta {
	name := string(s.UID)
	if name == "" { // offline: resources read from files have no UID
		name = strings.ToLower(s.Kind) + "-" + s.Name
	}
	m := metav1.ObjectMeta{
		Name:      name,
		Namespace: s.Namespace,
		Labels:    map[string]string{LabelManagedBy: ManagedBy},
	}
	if s.UID != "" {
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: s.APIVersion, Kind: s.Kind, Name: s.Name, UID: s.UID,
			Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(false),
		}}
	}
	return m
}

// Scope is the scope field of the final report of a subject.
func Scope(s Subject) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: s.APIVersion, Kind: s.Kind, Namespace: s.Namespace, Name: s.Name, UID: s.UID}
}

// Final builds the final report of a subject: a PolicyReport for a namespaced
// resource, a ClusterPolicyReport for a cluster-scoped one (R14, R15). The
// summary always equals the counts of the results (R18).
func Final(s Subject, results []wgv1alpha2.PolicyReportResult) (polr *wgv1alpha2.PolicyReport, cpolr *wgv1alpha2.ClusterPolicyReport) {
	Sort(results)
	summary := wgv1alpha2.SummaryOf(results)
	if s.Namespace != "" {
		return &wgv1alpha2.PolicyReport{
			TypeMeta:   metav1.TypeMeta{APIVersion: wgv1alpha2.GroupVersion.String(), Kind: "PolicyReport"},
			ObjectMeta: Meta(s), Scope: Scope(s), Summary: summary, Results: results,
		}, nil
	}
	return nil, &wgv1alpha2.ClusterPolicyReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: wgv1alpha2.GroupVersion.String(), Kind: "ClusterPolicyReport"},
		ObjectMeta: Meta(s), Scope: Scope(s), Summary: summary, Results: results,
	}
}

// WithProcess returns results with the process property set where it is
// missing (a BackgroundScanReport's results leave it out: it is always
// "background scan"). Properties maps are copied, never modified.
func WithProcess(results []wgv1alpha2.PolicyReportResult, process string) []wgv1alpha2.PolicyReportResult {
	for i := range results {
		p := results[i].Properties
		if _, ok := p[PropertyProcess]; ok {
			continue
		}
		if len(p) == 0 {
			results[i].Properties = sharedProps[process]
			continue
		}
		c := make(map[string]string, len(p)+1)
		for k, v := range p {
			c[k] = v
		}
		c[PropertyProcess] = process
		results[i].Properties = c
	}
	return results
}

// Written is what a writer last wrote of one resource's report (the
// scanner's hand-over, the merger's final report), kept by the resource's
// UID: where it is, the digest of its content (an unchanged report is not
// written again), and the resourceVersion the API server gave the write
// ("" where there is none: the hand-over).
type Written struct {
	Namespace       string
	Digest          uint64
	ResourceVersion string
}
