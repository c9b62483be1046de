package merge

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// watched are the kinds always watched; the admission kinds and the CEL
// policy kinds are watched where served (Run).
var watched = append(catalog.GVRs(nil, catalog.Classic),
	apiresources.BackgroundScanReport, apiresources.ClusterBackgroundScanReport)

// state is what the merger knows, per resource UID and per policy, and
// the lock guarding it: what every layer reads and changes.
type state struct {
	opts    Options
	client  dynamic.Interface
	metrics *metrics
	queue   *watch.Queue

	mu       sync.Mutex
	listed   map[schema.GroupVersionResource]bool
	sources  []*watch.Source
	states   map[string]*resourceState
	policies map[string]PolicyInfo
	// policyKinds are the kinds of the policies, by key (what a complete
	// list of a kind can tell gone).
	policyKinds map[string]schema.GroupVersionResource
	written     map[string]report.Written
	// writing are the final reports being written, with the
	// resourceVersions the watch showed meanwhile (owned.go).
	writing map[string]*inflight
	// seeds are the results of the final reports read at start-up, until
	// every kind is listed (merged.go).
	seeds map[string]seed
	// folds are the admission reports folded by resource (Options.Ingest).
	folds   map[string]*fold
	foldSeq int64
	// unadopted are Kyverno's admission reports that name their resource
	// without its UID, by queue key (adopt.go).
	unadopted map[string]unadopted
	// strings and metas hold the one copy of repeated values (state.go).
	strings map[string]string
	metas   map[string]*resultMeta
	// internLive is how many entries of strings and metas were live at
	// their last rebuild (releaseInterned).
	internLive int
	// kinds are the kinds watched (watched, and the CEL kinds served).
	kinds []schema.GroupVersionResource
	// shard is Options.Shard, as SetShard last set it.
	shard atomic.Pointer[func(namespace string) bool]
	// allListed is closed once every watched kind was listed: merging
	// earlier would write reports of a partial view (after a restart, a
	// resource whose policies are not listed yet would lose its entries).
	allListed chan struct{}
}

// releaseInterned rebuilds the intern tables from what the states still
// use once they have grown past twice what was live at the last rebuild
// (plus internSlack): the strings and metadata of deleted policies, rules
// and reports are then released. The cost, a walk of the states, is
// amortised over the entries added since. Interning only shares memory:
// a value still held elsewhere after a rebuild is merely not shared with
// its next copy. Callers hold m.mu.
func (m *state) releaseInterned() {
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
func (m *state) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := m.strings[s]; ok {
		return v
	}
	m.strings[s] = s
	return s
}

// compact converts report entries to their kept form. Callers hold m.mu.
func (m *state) compact(results []wgv1alpha2.PolicyReportResult) []compactResult {
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

// internSlack is how far the intern tables may grow past twice what was
// live at their last rebuild before they are rebuilt (releaseInterned).
const internSlack = 4096

// owns reports whether a namespace's reports are this merger's to write.
func (m *state) owns(namespace string) bool {
	owns := m.shard.Load()
	return owns == nil || *owns == nil || (*owns)(namespace)
}

// watchedKinds are the kinds watched (before Run: the classic ones). The
// caller holds m.mu.
func (m *state) watchedKinds() []schema.GroupVersionResource {
	if m.kinds == nil {
		return watched
	}
	return m.kinds
}

// recordLocked makes an intermediate report the admission or background
// part of its resource, owner. Callers hold m.mu and queue the resource.
func (m *state) recordLocked(_ context.Context, gvr schema.GroupVersionResource, u metav1.Object, owner metav1.OwnerReference, results []wgv1alpha2.PolicyReportResult) {
	labels := u.GetLabels()
	uid := string(owner.UID)
	owned := false
	for _, o := range u.GetOwnerReferences() {
		owned = owned || string(o.UID) == uid
	}
	st := m.states[uid]
	if st == nil {
		st = &resourceState{}
		m.states[uid] = st
	}
	st.subject = report.Subject{APIVersion: m.intern(owner.APIVersion), Kind: m.intern(owner.Kind),
		Namespace: m.intern(u.GetNamespace()), Name: owner.Name, UID: owner.UID}
	part := &st.background
	var sections []section
	if isAdmissionPart(gvr) {
		part = &st.admission
		// An admission result says so (Kyverno's do; older writers' may
		// not): the merger tells by it what a scan cannot recompute.
		sections = m.sections(report.WithProcess(results, report.ProcessAdmission), labels[report.LabelResourceHash])
	} else {
		// The scanner leaves out what every background result has.
		results = report.WithProcess(results, report.ProcessBackground)
	}
	prev := *part
	// What to go back to if this report is deleted before its merge
	// (merged.go's undone): the retained part it replaces.
	var before *reportPart
	switch {
	case isAdmissionPart(gvr) && prev.present && prev.retained:
		before = &prev
	case isAdmissionPart(gvr) && prev.present:
		before = prev.before
	}
	*part = reportPart{
		before:   before,
		present:  true,
		hash:     labels[report.LabelResourceHash],
		sections: sections,
		ref: reportRef{
			gvr: gvr, namespace: st.subject.Namespace, name: u.GetName(), uid: u.GetUID(),
			resourceVersion: u.GetResourceVersion(), gvrLabel: m.intern(labels[report.LabelResourceGVR]), owned: owned,
		},
		// What counted before stays known (verify.go), and a check of the
		// same sections need not be made again.
		lastGood: prev.lastGood, lastGoodHash: prev.lastGoodHash,
	}
	if isAdmissionPart(gvr) {
		sections = carryRetained(&prev, sections, m.ownHandlerLocked)
		part.sections = sections
	}
	if sections == nil {
		part.results = m.compact(results)
	}
	for _, sec := range sections {
		part.results = append(part.results, sec.results...)
	}
	if prev.checkedHash == admissionKey(part) {
		part.checkedHash, part.contentHash, part.unverifiable = prev.checkedHash, prev.contentHash, prev.unverifiable
	}
	st.updated, st.checked = m.opts.Now(), time.Time{}
}

// sections splits admission results by the content hash they are bound to
// (those without one: the report's hash label), newest first, and compacts
// them (their compact form leaves the hash property out). Callers hold m.mu.
func (m *state) sections(results []wgv1alpha2.PolicyReportResult, labelHash string) []section {
	split := report.Sections(results, labelHash)
	out := make([]section, len(split))
	for i, s := range split {
		out[i] = section{hash: m.intern(s.Hash), results: m.compact(s.Results)}
		for _, r := range s.Results {
			if after(r.Timestamp, out[i].newest) {
				out[i].newest = r.Timestamp
			}
		}
	}
	sortNewestFirst(out)
	return out
}

// removeLocked forgets the intermediate report gvr namespace/name of uid.
func (m *state) removeLocked(uid string, gvr schema.GroupVersionResource, namespace, name string) {
	st := m.states[uid]
	if st == nil {
		return
	}
	for _, part := range []*reportPart{&st.admission, &st.background} {
		// A retained part's report was deleted by the merger once merged:
		// its results stay (merged.go). Another goes back to what it was
		// before its report came (undone).
		if part.present && !part.retained && part.ref.gvr == gvr && part.ref.namespace == namespace && part.ref.name == name {
			*part = undone(part)
		}
	}
	if !st.admission.present && !st.background.present {
		delete(m.states, uid)
	}
}

// removePolicy forgets a policy (by its key): its results go from the
// reports of the resources that have them.
func (m *state) removePolicy(key string) {
	m.mu.Lock()
	next := maps.Clone(m.policies)
	delete(next, key)
	m.policies = next
	delete(m.policyKinds, key)
	m.mu.Unlock()
	name := key
	if _, n, ok := strings.Cut(key, "\x00"); ok {
		name = n // a CEL policy's results carry its name alone
	}
	m.enqueuePolicy(name)
}

// enqueuePolicy enqueues every resource with results of the policy.
func (m *state) enqueuePolicy(name string) {
	m.mu.Lock()
	var uids []string
	for uid, st := range m.states {
		if hasPolicy(st, name) {
			uids = append(uids, uid)
		}
	}
	m.mu.Unlock()
	for _, uid := range uids {
		m.queue.Add(uid)
	}
}

// ownHandlerLocked says whether a result is of a rule Kyverno writes from
// another handler than its validate rules' (PolicyInfo.KyvernoOnly and
// OtherHandler).
// Callers hold m.mu.
func (m *state) ownHandlerLocked(source, policy, rule string) bool {
	p, ok := m.policies[PolicyKey(source, policy)]
	return ok && (p.KyvernoOnly[rule] || p.OtherHandler[rule])
}

// folded says whether the reports of gvr are folded.
func (m *state) folded(gvr schema.GroupVersionResource) bool {
	return m.opts.Ingest && isAdmissionPart(gvr)
}

// recordFoldLocked makes f the admission part of uid. Callers hold m.mu.
func (m *state) recordFoldLocked(ctx context.Context, uid string, f *fold) {
	gvr := apiresources.EphemeralReport
	if f.namespace == "" {
		gvr = apiresources.ClusterEphemeralReport
	}
	meta := &metav1.ObjectMeta{
		Namespace: f.namespace, Name: uid, ResourceVersion: strconv.FormatInt(f.seq, 10),
		CreationTimestamp: metav1.NewTime(f.at),
		Labels:            map[string]string{report.LabelResourceUID: uid, report.LabelResourceHash: f.hash, report.LabelResourceGVR: f.gvrLabel},
	}
	// The part's results are the fold's (record keeps what it is given).
	m.recordLocked(ctx, gvr, meta, f.owner, slices.Clone(f.results))
	m.states[uid].admission.ref.folded = true
}

// removeFolded forgets a folded report deleted by someone else than the
// merger (by the merger: its results are kept, merged.go). When it was the
// last of its resource's, its results go, as an AdmissionReport's do.
func (m *state) removeFolded(gvr schema.GroupVersionResource, namespace, name string) []string {
	key := sourceKey{gvr, namespace, name}
	var touched []string
	for uid, f := range m.folds {
		if _, ok := f.sources[key]; !ok {
			continue
		}
		delete(f.sources, key)
		touched = append(touched, uid)
		if len(f.sources) > 0 {
			continue
		}
		delete(m.folds, uid)
		if st := m.states[uid]; st != nil && st.admission.present && !st.admission.retained && st.admission.ref.folded {
			st.admission = undone(&st.admission)
			if !st.admission.present && !st.background.present {
				delete(m.states, uid)
			}
		}
	}
	return touched
}

// replaceFolded forgets the folded reports of gvr not in a complete list.
// Callers hold m.mu.
func (m *state) replaceFolded(gvr schema.GroupVersionResource, present map[string]bool) []string {
	var gone []sourceKey
	for _, f := range m.folds {
		for k := range f.sources {
			if k.gvr == gvr && !present[k.namespace+"/"+k.name] {
				gone = append(gone, k)
			}
		}
	}
	var touched []string
	for _, k := range gone {
		touched = append(touched, m.removeFolded(k.gvr, k.namespace, k.name)...)
	}
	return touched
}

// awaitAdoption keeps a report until its resource is read. Callers hold
// m.mu.
func (m *state) awaitAdoptionLocked(gvr schema.GroupVersionResource, u *unstructured.Unstructured) string {
	key := adoptKey(gvr, u.GetNamespace(), u.GetName())
	m.unadopted[key] = unadopted{gvr: gvr, report: u}
	return key
}

// keepSeed holds the results of a final report read at start-up until the
// policies are listed. Callers hold m.mu.
func (m *state) keepSeed(r *wgv1alpha2.PolicyReport, s report.Subject) {
	if len(r.Results) == 0 {
		return
	}
	if m.seeds == nil {
		m.seeds = map[string]seed{}
	}
	m.seeds[string(s.UID)] = seed{subject: s, results: m.compact(r.Results)}
}

// seedAdmission keeps, as retained admission parts, the results of the final
// reports read at start-up that no scan recomputes: those of policies with
// background off, and those marked as admission results. (Their process
// property alone cannot tell: Kyverno derives it from the policy's
// background setting.) Callers hold m.mu, once every kind is listed.
func (m *state) seedAdmission() {
	for uid, sd := range m.seeds {
		var kept []compactResult
		for _, r := range sd.results {
			info, known := m.policies[PolicyKey(r.meta.source, r.meta.policy)]
			if r.meta.properties[report.PropertyProcess] == report.ProcessAdmission || (known && !info.Background) {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			continue
		}
		s := sd.subject
		gvr := apiresources.AdmissionReport
		if s.Namespace == "" {
			gvr = apiresources.ClusterAdmissionReport
		}
		sec := section{hash: seededHash, results: kept}
		for _, r := range kept {
			if at := (metav1.Timestamp{Seconds: r.seconds, Nanos: r.nanos}); after(at, sec.newest) {
				sec.newest = at
			}
		}
		st := m.states[uid]
		if st == nil {
			st = &resourceState{subject: report.Subject{APIVersion: m.intern(s.APIVersion), Kind: m.intern(s.Kind), Namespace: m.intern(s.Namespace), Name: s.Name, UID: s.UID}}
			m.states[uid] = st
		}
		if a := &st.admission; a.present {
			// A report of the resource came while the merger was down (a
			// forged review's, say): the results read back count beside it
			// unless a newer section of it counts (verify.go).
			a.sections = append(a.sections, sec)
			sortNewestFirst(a.sections)
			a.results = append(a.results, kept...)
			continue
		}
		st.admission = reportPart{present: true, retained: true, sections: []section{sec}, results: kept,
			ref: reportRef{gvr: gvr, namespace: s.Namespace, name: uid}}
		st.updated = m.opts.Now()
	}
	m.seeds = nil
}

// dropRetained forgets the retained admission results of uid: superseded,
// or their resource is gone. Callers hold m.mu.
func (m *state) dropRetained(uid string) {
	st := m.states[uid]
	if st == nil || !st.admission.retained {
		return
	}
	st.admission = reportPart{}
	if !st.background.present {
		delete(m.states, uid)
	}
}

// startWrite marks a report as being written.
func (m *state) startWrite(uid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.writing[uid]
	if f == nil {
		f = &inflight{}
		m.writing[uid] = f
	}
	f.writes++
}

// endWrite ends a write (recorded in m.written, or failed); others says
// the watch showed a version other than the one written meanwhile.
func (m *state) endWrite(uid string) (others bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.writing[uid]
	if f == nil {
		return false
	}
	if f.writes--; f.writes == 0 {
		delete(m.writing, uid)
	}
	rv := m.written[uid].ResourceVersion
	for _, s := range f.seen {
		if s != rv {
			others = true
		}
	}
	f.seen = nil
	return others
}
