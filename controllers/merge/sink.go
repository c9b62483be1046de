package merge

import (
	"context"
	"maps"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

var _ watch.StreamingSink = (*intake)(nil)

// Upsert records a policy or an intermediate report.
func (m *intake) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
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

// Remove forgets a policy or an intermediate report.
func (m *intake) Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
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

// StreamsLists makes the watch deliver listed objects one by one through
// Upsert and hand Replace only stubs (watch.StreamingSink): 10,000 reports
// are never held whole in memory while they are listed.
func (m *intake) StreamsLists() {}

// Replace makes objs the complete list of a kind. Objects already delivered
// through Upsert come as stubs (metadata only); full ones are recorded here.
func (m *intake) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
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
func (m *intake) Listed(ctx context.Context, gvr schema.GroupVersionResource) {
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
