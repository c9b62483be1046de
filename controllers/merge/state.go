package merge

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// internSlack is how far the intern tables may grow past twice what was
// live at their last rebuild before they are rebuilt (releaseInterned).
const internSlack = 4096

// releaseInterned rebuilds the intern tables from what the states still
// use once they have grown past twice what was live at the last rebuild
// (plus internSlack): the strings and metadata of deleted policies, rules
// and reports are then released. The cost, a walk of the states, is
// amortised over the entries added since. Interning only shares memory:
// a value still held elsewhere after a rebuild is merely not shared with
// its next copy. Callers hold m.mu.
func (m *Merger) releaseInterned() {
	if len(m.strings)+len(m.metas) <= 2*m.internLive+internSlack {
		return
	}
	strs := make(map[string]string, len(m.strings)/2)
	metas := make(map[string]*resultMeta, len(m.metas)/2)
	keep := func(s string) {
		if s != "" {
			strs[s] = s
		}
	}
	keepResults := func(rs []compactResult) {
		for _, r := range rs {
			if _, ok := metas[r.meta.key]; !ok {
				metas[r.meta.key] = r.meta
				for _, s := range []string{r.meta.source, r.meta.policy, r.meta.rule, r.meta.category, string(r.meta.severity)} {
					keep(s)
				}
			}
			keep(r.message)
			keep(string(r.result))
		}
	}
	for _, st := range m.states {
		keep(st.subject.APIVersion)
		keep(st.subject.Kind)
		keep(st.subject.Namespace)
		for _, part := range []*reportPart{&st.admission, &st.background} {
			keepResults(part.results)
			keepResults(part.lastGood)
			keep(part.ref.gvrLabel)
		}
	}
	m.strings, m.metas = strs, metas
	m.internLive = len(strs) + len(metas)
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

// compact converts report entries to their kept form. Callers hold m.mu.
func (m *Merger) compact(results []wgv1alpha2.PolicyReportResult) []compactResult {
	if len(results) == 0 {
		return nil
	}
	m.releaseInterned()
	out := make([]compactResult, len(results))
	var key strings.Builder
	for i, r := range results {
		key.Reset()
		for _, f := range []string{r.Source, r.Policy, r.Rule, r.Category, string(r.Severity), strconv.FormatBool(r.Scored)} {
			key.WriteString(f)
			key.WriteByte(0)
		}
		for _, k := range slices.Sorted(maps.Keys(r.Properties)) {
			if k == report.PropertyResourceHash {
				continue // the section's, never reported (verify.go)
			}
			key.WriteString(k)
			key.WriteByte('=')
			key.WriteString(r.Properties[k])
			key.WriteByte(0)
		}
		meta, ok := m.metas[key.String()]
		if !ok {
			meta = &resultMeta{
				key:    key.String(),
				source: m.intern(r.Source), policy: m.intern(r.Policy), rule: m.intern(r.Rule), category: m.intern(r.Category),
				severity: wgv1alpha2.Severity(m.intern(string(r.Severity))), scored: r.Scored, properties: reportedProperties(r.Properties),
			}
			m.metas[meta.key] = meta
		}
		out[i] = compactResult{meta: meta, message: m.intern(r.Message), result: wgv1alpha2.Result(m.intern(string(r.Result))),
			seconds: r.Timestamp.Seconds, nanos: r.Timestamp.Nanos}
	}
	return out
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
