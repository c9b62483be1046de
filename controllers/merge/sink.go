package merge

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

var _ watch.StreamingSink = (*Merger)(nil)

func isPolicy(gvr schema.GroupVersionResource) bool {
	_, ok := catalog.KindOf(gvr)
	return ok
}

// policyKeyOf is the key of a policy object in Input.Policies, and the
// policy name its results carry.
func policyKeyOf(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (key, name string) {
	k, ok := catalog.KindOf(gvr)
	if !ok {
		return u.GetName(), u.GetName()
	}
	name = k.ReportName(u.GetNamespace(), u.GetName())
	return PolicyKey(k.Source, name), name
}

func isAdmission(gvr schema.GroupVersionResource) bool {
	return gvr == apiresources.AdmissionReport || gvr == apiresources.ClusterAdmissionReport
}

// Upsert records a policy or an intermediate report.
func (m *Merger) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isPolicy(gvr) {
		key, info, err := policyInfo(gvr, u)
		if err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "policy could not be read; its results are not reported", "name", u.GetName())
			return
		}
		_, name := policyKeyOf(gvr, u)
		m.mu.Lock()
		next := maps.Clone(m.policies) // copy on write: reconcilers read the map unlocked
		next[key] = info
		m.policies = next
		m.policyKinds[key] = gvr
		m.mu.Unlock()
		m.enqueuePolicy(name)
		return
	}
	if !m.owns(u.GetNamespace()) {
		return // a report of another replica's shard
	}
	if m.folded(gvr) {
		m.upsertFolded(ctx, gvr, u)
		return
	}
	var r kyvernov2.AdmissionReport // every intermediate kind has the same shape
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "intermediate report could not be read; ignored", "name", u.GetNamespace()+"/"+u.GetName())
		return
	}
	// Background reports written by tally carry their entries and their
	// times in annotations. Entries left without a time (a malformed
	// annotation, a report of another writer that has neither) take the
	// report's creation time rather than none. Packed entries that cannot be
	// read are left out (logged): the scanner rewrites the report at the
	// resource's next scan.
	results, err := report.IntermediateResults(r.Spec.Results, u.GetAnnotations())
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "intermediate report's results partly unreadable; the rest are used", "name", u.GetNamespace()+"/"+u.GetName())
	}
	creation := u.GetCreationTimestamp()
	created := metav1.Timestamp{Seconds: creation.Unix()}
	for i := range results {
		if results[i].Timestamp == (metav1.Timestamp{}) && !creation.IsZero() {
			results[i].Timestamp = created
		}
	}
	owner, namespace, named := report.ReportOwner(u, r.Spec.Owner)
	if !named || namespace != u.GetNamespace() {
		// A report that names no whole resource (an empty owner and no
		// labels naming one) has nothing to report on; one naming a resource
		// of another namespace is not written there.
		m.metrics.unusable.Inc()
		logr.FromContextOrDiscard(ctx).V(1).Info("intermediate report names no resource of its namespace; ignored", "kind", gvr.Resource, "namespace", u.GetNamespace(), "name", u.GetName())
		return
	}
	m.mu.Lock()
	m.recordLocked(ctx, gvr, u, owner, results)
	m.mu.Unlock()
	m.queue.Add(string(owner.UID))
}

// recordLocked makes an intermediate report the admission or background
// part of its resource, owner. Callers hold m.mu and queue the resource.
func (m *Merger) recordLocked(_ context.Context, gvr schema.GroupVersionResource, u metav1.Object, owner metav1.OwnerReference, results []wgv1alpha2.PolicyReportResult) {
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
func (m *Merger) sections(results []wgv1alpha2.PolicyReportResult, labelHash string) []section {
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

// sortNewestFirst orders sections by their newest result, newest first.
func sortNewestFirst(sections []section) {
	slices.SortStableFunc(sections, func(a, b section) int {
		return cmp.Or(cmp.Compare(b.newest.Seconds, a.newest.Seconds), cmp.Compare(b.newest.Nanos, a.newest.Nanos))
	})
}

// Remove forgets a policy or an intermediate report.
func (m *Merger) Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isPolicy(gvr) {
		key, _ := policyKeyOf(gvr, u)
		m.removePolicy(key)
		return
	}
	if !m.owns(u.GetNamespace()) {
		return
	}
	if m.folded(gvr) {
		m.mu.Lock()
		delete(m.unadopted, adoptKey(gvr, u.GetNamespace(), u.GetName()))
		touched := m.removeFolded(gvr, u.GetNamespace(), u.GetName())
		m.mu.Unlock()
		for _, uid := range touched {
			m.queue.Add(uid)
		}
		return
	}
	uid := u.GetLabels()[report.LabelResourceUID]
	if uid == "" {
		// Not a string (or absent): the report's name is the last resort.
		uid, _, _ = unstructured.NestedString(u.Object, "spec", "owner", "uid")
	}
	if uid == "" {
		uid = u.GetName()
	}
	m.mu.Lock()
	m.removeLocked(uid, gvr, u.GetNamespace(), u.GetName())
	m.mu.Unlock()
	m.queue.Add(uid)
}

// removeLocked forgets the intermediate report gvr namespace/name of uid.
func (m *Merger) removeLocked(uid string, gvr schema.GroupVersionResource, namespace, name string) {
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

// StreamsLists makes the watch deliver listed objects one by one through
// Upsert and hand Replace only stubs (watch.StreamingSink): 10,000 reports
// are never held whole in memory while they are listed.
func (m *Merger) StreamsLists() {}

// Replace makes objs the complete list of a kind. Objects already delivered
// through Upsert come as stubs (metadata only); full ones are recorded here.
func (m *Merger) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		if _, full := u.Object["spec"]; full {
			m.Upsert(ctx, gvr, u)
		}
		present[u.GetNamespace()+"/"+u.GetName()] = true
	}
	if m.folded(gvr) {
		m.mu.Lock()
		for key, w := range m.unadopted { // deleted while the watch was down
			if w.gvr == gvr && !present[w.report.GetNamespace()+"/"+w.report.GetName()] {
				delete(m.unadopted, key)
			}
		}
		touched := m.replaceFolded(gvr, present)
		m.mu.Unlock()
		for _, uid := range touched {
			m.queue.Add(uid)
		}
		return
	}
	if !isPolicy(gvr) {
		// Reports deleted while the watch was down.
		var gone []string
		m.mu.Lock()
		for uid, st := range m.states {
			for _, part := range []*reportPart{&st.admission, &st.background} {
				if part.present && !part.retained && part.ref.gvr == gvr && !present[part.ref.namespace+"/"+part.ref.name] {
					m.removeLocked(uid, gvr, part.ref.namespace, part.ref.name)
					gone = append(gone, uid)
				}
			}
		}
		m.mu.Unlock()
		for _, uid := range gone {
			m.queue.Add(uid)
		}
		return
	}
	// Policies of this kind deleted while the watch was down.
	keys := make(map[string]bool, len(objs))
	for _, u := range objs {
		key, _ := policyKeyOf(gvr, u)
		keys[key] = true
	}
	m.mu.Lock()
	var gone []string
	for key, g := range m.policyKinds {
		if g == gvr && !keys[key] {
			gone = append(gone, key)
		}
	}
	m.mu.Unlock()
	for _, key := range gone {
		m.removePolicy(key)
	}
}

// Listed records that a kind was listed once. Once every kind was, the
// workers start, and the final reports found at start-up whose resource has
// no intermediate report left are queued: they go (R19).
func (m *Merger) Listed(ctx context.Context, gvr schema.GroupVersionResource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listed[gvr] {
		return
	}
	m.listed[gvr] = true
	for _, g := range m.watchedKinds() {
		if !m.listed[g] {
			return
		}
	}
	m.seedAdmission()
	for uid := range m.written {
		if m.states[uid] == nil {
			m.queue.Add(uid)
		}
	}
	close(m.allListed)
}

// removePolicy forgets a policy (by its key): its results go from the
// reports of the resources that have them.
func (m *Merger) removePolicy(key string) {
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
func (m *Merger) enqueuePolicy(name string) {
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

func hasPolicy(st *resourceState, name string) bool {
	for _, r := range st.admission.results {
		if r.meta.policy == name {
			return true
		}
	}
	for _, r := range st.background.results {
		if r.meta.policy == name {
			return true
		}
	}
	return false
}

// ownHandlerLocked says whether a result is of a rule Kyverno writes from
// another handler than its validate rules' (PolicyInfo.KyvernoOnly and
// OtherHandler).
// Callers hold m.mu.
func (m *Merger) ownHandlerLocked(source, policy, rule string) bool {
	p, ok := m.policies[PolicyKey(source, policy)]
	return ok && (p.KyvernoOnly[rule] || p.OtherHandler[rule])
}
