package merge

import (
	"maps"
	"time"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
	// reportDeleted: its final report was deleted by someone else
	// (owned.go): written again only once its resource is found.
	reportDeleted bool
}

// reportPart is one intermediate report of a resource.
type reportPart struct {
	present bool
	// retained: an admission part whose report the merger deleted once the
	// final report held it (merged.go), or read back from the final report
	// at start-up; its results stay until a newer report, the policy or
	// the resource replaces them.
	retained bool
	results  []compactResult
	hash     string // audit.kyverno.io/resource.hash
	// sections are the admission report's results by the content hash
	// they are bound to (report.PropertyResourceHash), newest first;
	// results holds them all.
	sections []section
	ref      reportRef
	// Of the admission report (verify.go): checkedHash is the key of the
	// sections (admissionKey) the resource's content was last compared
	// with, contentHash the hash it had then; unverifiable says the content cannot be read; lastGood are the
	// results that last counted, for the content of lastGoodHash.
	checkedHash, contentHash string
	unverifiable             bool
	// before is the retained part this admission part replaced, restored
	// if its report is deleted by someone else before the merge
	// (merged.go's undone).
	before *reportPart
	// rechecks counts the checks that found the content not there yet
	// (verify.go).
	rechecks     int
	lastGood     []compactResult
	lastGoodHash string
}

// section is the admission results of one content hash.
type section struct {
	hash    string
	results []compactResult
	newest  metav1.Timestamp // of its newest result
}

// reportRef locates an intermediate report, for the orphan check.
type reportRef struct {
	gvr             schema.GroupVersionResource
	namespace, name string
	uid             types.UID
	resourceVersion string
	gvrLabel        string // audit.kyverno.io/resource.gvr
	owned           bool   // has an ownerReference to its resource
	// folded: the fold of the resource's admission reports (fold.go),
	// named by the resource's UID; resourceVersion counts its changes.
	folded bool
}

// compactResult is an intermediate report entry as the merger keeps it:
// what every entry of the same rule shares is held once (resultMeta), the
// message is interned, and the rest is a few words. 190,000 entries (10,000
// Pods under the Pod Security Standards) take about 10 MiB instead of 35.
// The entries' resources and resourceSelector are not kept: a final report
// names its resource in its scope.
type compactResult struct {
	meta    *resultMeta
	message string
	result  wgv1alpha2.Result
	seconds int64
	nanos   int32
}

// resultMeta is what the entries of one rule share. Never modified.
type resultMeta struct {
	key                            string // in Merger.metas
	source, policy, rule, category string
	severity                       wgv1alpha2.Severity
	scored                         bool
	properties                     map[string]string
}

// reportedProperties copies a result's properties but the content hash an
// admission result is bound to (nil when none is left).
func reportedProperties(p map[string]string) map[string]string {
	if _, ok := p[report.PropertyResourceHash]; !ok {
		return maps.Clone(p)
	}
	if len(p) == 1 {
		return nil
	}
	out := make(map[string]string, len(p)-1)
	for k, v := range p {
		if k != report.PropertyResourceHash {
			out[k] = v
		}
	}
	return out
}

// expand rebuilds the report entries of compact results. The entries share
// their Properties maps: never modify them.
func expand(results []compactResult) []wgv1alpha2.PolicyReportResult {
	if len(results) == 0 {
		return nil
	}
	out := make([]wgv1alpha2.PolicyReportResult, len(results))
	for i, c := range results {
		out[i] = wgv1alpha2.PolicyReportResult{
			Source: c.meta.source, Policy: c.meta.policy, Rule: c.meta.rule, Category: c.meta.category,
			Severity: c.meta.severity, Scored: c.meta.scored, Properties: c.meta.properties,
			Message: c.message, Result: c.result, Timestamp: metav1.Timestamp{Seconds: c.seconds, Nanos: c.nanos},
		}
	}
	return out
}

// inflight is a final report being written: the resourceVersions the
// watch showed meanwhile.
type inflight struct {
	writes int
	seen   []string
}

// seed is what a final report read at start-up holds, until the policies
// are listed (seedAdmission).
type seed struct {
	subject report.Subject
	results []compactResult
}

// seededHash marks the section of admission results read back from a final
// report: they were verified before that report was written, and count for
// the content the resource has while it exists (verify.go).
const seededHash = "(final report)"

// ownerRef is what the GET of a resource needs.
type ownerRef struct {
	gvrLabel   string // audit.kyverno.io/resource.gvr, may be empty
	apiVersion string
	kind       string
	namespace  string
	name       string
}

// subjectRef locates the resource of a state for a GET (the orphan check,
// the content check, the check before writing a deleted report again): its
// type from either report's audit.kyverno.io/resource.gvr label, else from
// apiVersion and kind. Callers hold m.mu.
func subjectRef(st *resourceState) ownerRef {
	label := st.background.ref.gvrLabel
	if label == "" {
		label = st.admission.ref.gvrLabel
	}
	return ownerRef{gvrLabel: label, apiVersion: st.subject.APIVersion, kind: st.subject.Kind,
		namespace: st.subject.Namespace, name: st.subject.Name}
}
