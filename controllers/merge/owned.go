package merge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// The final reports are tally's (R48).
//
// The merger watches the final reports labelled as its own (metadata only:
// Options.Metadata) and puts right, within seconds, one someone else
// changed: a report at another resourceVersion than the merger's last
// write gave it is taken as unknown content and written again (a JSON
// patch of the same content changes nothing: a write of the merger's seen
// before its answer costs one patch that does nothing); one the merger did
// not write is deleted, or overwritten when its resource has results; one
// deleted behind its back is created again, once a GET has found its
// resource still there (the garbage collector deletes the report of a
// deleted resource: that one stays gone, and the resource's retained
// admission results go with it).
//
// At start-up, a report read back counts as the merger's only when the
// merger made its last write (managedFields: their times have a precision
// of a second, so an edit made while tally was down in the same second as
// the merger's last write passes), its name is the UID its scope names,
// and that resource is of the report's namespace.

// finalReports is the Sink of the final reports' metadata watch.
type finalReports struct {
	m *state
	// listed says the first list was seen (seed read the same reports:
	// deletions are looked for in later lists only). The namespaced and
	// cluster-scoped kinds' reflectors call Replace concurrently: mu
	// guards it.
	mu     sync.Mutex
	listed map[schema.GroupVersionResource]bool
}

var _ watch.Sink = (*finalReports)(nil)

// lastWriter says whether manager made the last write of an object, by its
// managedFields (an object without any: yes, it cannot be told).
func lastWriter(u *unstructured.Unstructured, manager string) bool {
	fields := u.GetManagedFields()
	if len(fields) == 0 {
		return true
	}
	var ours, theirs time.Time
	hasOurs := false
	for _, f := range fields {
		var at time.Time
		if f.Time != nil {
			at = f.Time.Time
		}
		if f.Manager == manager {
			hasOurs = true
			if at.After(ours) {
				ours = at
			}
		} else if at.After(theirs) {
			theirs = at
		}
	}
	return hasOurs && !theirs.After(ours)
}

// checkWritten reads a report the watch showed in another version while
// the merger wrote it: one that is no longer at the version written was
// changed by someone else, and is put right.
func (m *finalWriter) checkWritten(ctx context.Context, gvr schema.GroupVersionResource, namespace, uid, rv string) error {
	u, err := m.client.Resource(gvr).Namespace(namespace).Get(ctx, uid, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // deleted since: the watch tells (Remove)
	}
	if err != nil {
		return fmt.Errorf("check final report %s/%s: %w", namespace, uid, err)
	}
	if u.GetResourceVersion() == rv {
		return nil
	}
	m.mu.Lock()
	if w, ok := m.written[uid]; ok && w.ResourceVersion == rv {
		m.written[uid] = report.Written{Namespace: namespace}
	}
	m.mu.Unlock()
	m.metrics.putRight.WithLabelValues("edited").Inc()
	logr.FromContextOrDiscard(ctx).Info("a final report was edited by someone else while written; put right", "namespace", namespace, "name", uid)
	m.queue.Add(uid)
	return nil
}

// Upsert: a report the merger did not write as it is now (its
// resourceVersion is not the one the merger's last write gave it, and
// someone else manages fields of it) is written again.
func (f *finalReports) Upsert(ctx context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	m := f.m
	if !m.owns(u.GetNamespace()) {
		return
	}
	uid := u.GetName()
	m.mu.Lock()
	w, had := m.written[uid]
	if had && w.ResourceVersion != "" && w.ResourceVersion == u.GetResourceVersion() {
		m.mu.Unlock()
		return // the merger's last write
	}
	if f := m.writing[uid]; f != nil {
		// Being written: the merger's own write, seen before its answer,
		// or someone else's. The write's answer tells (endWrite).
		f.seen = append(f.seen, u.GetResourceVersion())
		m.mu.Unlock()
		return
	}
	// Its content is unknown: whatever the merge gives differs from it.
	m.written[uid] = report.Written{Namespace: u.GetNamespace()}
	m.mu.Unlock()
	what := "edited"
	if !had {
		what = "created"
	}
	m.metrics.putRight.WithLabelValues(what).Inc()
	logr.FromContextOrDiscard(ctx).Info("a final report was "+what+" by someone else; put right", "namespace", u.GetNamespace(), "name", uid)
	m.queue.Add(uid)
}

// Remove: a report the merger wrote, deleted by someone else, is written
// again (reconcile checks first that its resource still exists).
func (f *finalReports) Remove(ctx context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	f.deleted(ctx, u.GetNamespace(), u.GetName())
}

func (f *finalReports) deleted(ctx context.Context, namespace, uid string) {
	m := f.m
	if !m.owns(namespace) {
		return
	}
	m.mu.Lock()
	w, had := m.written[uid]
	had = had && w.Namespace == namespace
	if had {
		delete(m.written, uid)
		if st := m.states[uid]; st != nil {
			st.reportDeleted = true
		}
	}
	m.mu.Unlock()
	if !had {
		return // the merger deleted it (or never wrote it)
	}
	m.metrics.putRight.WithLabelValues("deleted").Inc()
	logr.FromContextOrDiscard(ctx).V(1).Info("a final report was deleted by someone else", "namespace", namespace, "name", uid)
	m.queue.Add(uid)
}

// Replace: after the first list, a report the merger wrote that a list no
// longer has was deleted while the watch was down.
func (f *finalReports) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[u.GetNamespace()+"/"+u.GetName()] = true
		f.Upsert(ctx, gvr, u)
	}
	f.mu.Lock()
	first := !f.listed[gvr]
	f.listed[gvr] = true
	f.mu.Unlock()
	if first {
		return
	}
	namespaced, _ := f.m.opts.ReportAPI.FinalGVRs()
	var gone [][2]string
	f.m.mu.Lock()
	for uid, w := range f.m.written {
		if (w.Namespace != "") == (gvr == namespaced) && !present[w.Namespace+"/"+uid] {
			gone = append(gone, [2]string{w.Namespace, uid})
		}
	}
	f.m.mu.Unlock()
	for _, g := range gone {
		f.deleted(ctx, g[0], g[1])
	}
}

func (f *finalReports) Listed(context.Context, schema.GroupVersionResource) {}

// recreateAllowed says, for a resource whose final report someone else
// deleted, whether it still exists (its report is then written again);
// when it is gone its retained admission results go too. Callers hold no
// lock.
func (m *finalWriter) recreateAllowed(ctx context.Context, uid string) (bool, error) {
	m.mu.Lock()
	st := m.states[uid]
	if st == nil || !st.reportDeleted {
		m.mu.Unlock()
		return true, nil
	}
	o := subjectRef(st)
	m.mu.Unlock()
	gone, err := m.cl.resourceGone(ctx, uid, o)
	if err != nil && !contentUnreadable(err) {
		return false, err // tried again with backoff
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.states[uid]; st != nil {
		if gone {
			// Its background part goes once the scanner sees the delete:
			// until then, every write is checked again.
			m.dropRetained(uid)
		} else {
			st.reportDeleted = false
		}
	}
	return !gone, nil
}
