package scan

import (
	"context"
	"maps"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/memstore"
)

var _ watch.StreamingSink = (*Scanner)(nil)

// StreamsLists: listed objects arrive one by one through Upsert, and Replace
// receives stubs (see watch.StreamingSink), so that a large kind is never
// held whole in memory while it is listed.
func (s *Scanner) StreamsLists() {}

// Upsert records a changed object: a control event is queued (control.go);
// a resource or namespace is stored and its UID queued.
func (s *Scanner) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isControlKind(gvr) {
		s.control.event(gvr, u, false)
		return
	}
	if gvr == apiresources.Namespace {
		s.upsertNamespace(ctx, u)
		s.kinds.namespaceSeen(u.GetName())
		if !s.kinds.needed(gvr) {
			return
		}
	}
	if !s.owns(u.GetNamespace()) {
		return // another replica's shard (a kind watched across namespaces)
	}
	s.upsertResource(ctx, gvr, u)
}

// owns reports whether a namespace ("": cluster-scoped resources) is in
// this replica's shard (always, unsharded).
func (s *Scanner) owns(namespace string) bool {
	return s.opts.Shard == nil || s.opts.Shard(namespace)
}

// Remove records a deleted object, as Upsert does.
func (s *Scanner) Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isControlKind(gvr) {
		s.control.event(gvr, u, true)
		return
	}
	if gvr == apiresources.Namespace {
		if err := s.store.Write(func(w *memstore.WriteTxn) error { return w.DeleteNamespace(u.GetName()) }); err != nil {
			// Only the labels of a namespace no resource is in any more
			// stay behind: nothing is evaluated against them.
			logr.FromContextOrDiscard(ctx).Error(err, "forgetting a deleted namespace failed", "namespace", u.GetName())
		}
		s.kinds.namespaceGone(u.GetName())
	}
	s.forgetResource(ctx, string(u.GetUID()))
}

// forgetResource drops a resource and its results from the store; its
// reconcile then deletes its report.
func (s *Scanner) forgetResource(ctx context.Context, uid string) {
	var gone []memstore.Result
	if err := s.store.Write(func(w *memstore.WriteTxn) (err error) {
		if gone, err = w.Results(uid); err != nil {
			return err
		}
		return w.DeleteResource(uid)
	}); err != nil {
		// The store is the scanner's cache of the cluster: its writes fail
		// only on a schema bug (memstore's golden test pins the schema). The
		// reconcile queued below finds the resource still stored and
		// evaluates it; the next list forgets it again.
		logr.FromContextOrDiscard(ctx).Error(err, "forgetting a deleted resource failed", "uid", uid)
	} else {
		s.countResults(gone, -1)
	}
	s.queue.Add(uid) // reconcile finds it gone and deletes its report
}

// Replace removes what is not in a complete list; the objects themselves
// were delivered through Upsert already (objs are stubs).
func (s *Scanner) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	if isControlKind(gvr) {
		s.control.list(gvr, objs)
		return
	}
	s.replaceIn(ctx, gvr, "", objs)
}

// replaceIn removes what is not in a complete list of one namespace ("":
// all).
func (s *Scanner) replaceIn(ctx context.Context, gvr schema.GroupVersionResource, namespace string, objs []*unstructured.Unstructured) {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[string(u.GetUID())] = true
	}
	group, kind := s.kinds.groupKind(gvr)
	if kind == "" {
		return
	}
	stale, _ := s.store.Read().ResourcesOfKind(group, kind, namespace)
	for _, r := range stale {
		if !present[r.UID] {
			s.Remove(ctx, gvr, &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"uid": r.UID, "name": r.Name, "namespace": r.Namespace}}})
		}
	}
}

// Listed records the end of a kind's first list; for a control kind, once
// the list is applied (control.go).
func (s *Scanner) Listed(ctx context.Context, gvr schema.GroupVersionResource) {
	if isControlKind(gvr) {
		s.control.endOfList(gvr)
		return
	}
	s.listedIn(gvr, "")
}

// listedIn marks a kind listed in a namespace ("": all); once every watch
// has listed, the reports of resources not seen go.
func (s *Scanner) listedIn(gvr schema.GroupVersionResource, namespace string) {
	all := s.kinds.listed(gvr, namespace)
	if s.kinds.policiesListed() {
		s.releaseDeferred()
	}
	if all {
		s.sweepOrphans()
	}
}

// sweepOrphans enqueues the reports whose resource is not in the store, so
// that reports of resources deleted while tally was down go.
func (s *Scanner) sweepOrphans() {
	r := s.store.Read()
	for _, uid := range s.reports.known() {
		if res, err := r.Resource(uid); err == nil && res == nil {
			s.queue.Add(uid)
		}
	}
}

func (s *Scanner) upsertResource(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	res, err := compact(u)
	if err != nil {
		// A resource that cannot be read is final until it changes.
		logr.FromContextOrDiscard(ctx).Error(err, "a resource could not be read; skipped", "gvr", gvr.String(), "uid", u.GetUID())
		return
	}
	s.kinds.remember(gvr, res.Group, res.Kind)
	changed := true
	err = s.store.Write(func(w *memstore.WriteTxn) error {
		prev, err := w.Resource(res.UID)
		if err != nil {
			return err
		}
		changed = prev == nil || prev.Hash != res.Hash
		return w.PutResource(res)
	})
	if err != nil {
		// Only on a schema bug (see forgetResource); the resource's next
		// event, or the next list, stores it again.
		logr.FromContextOrDiscard(ctx).Error(err, "storing a resource failed", "uid", res.UID)
		return
	}
	if changed {
		s.queue.Add(res.UID)
	}
}

func (s *Scanner) upsertNamespace(ctx context.Context, u *unstructured.Unstructured) {
	name := u.GetName()
	labels := u.GetLabels()
	changed := false
	if err := s.store.Write(func(w *memstore.WriteTxn) error {
		prev, err := w.Namespace(name)
		if err != nil {
			return err
		}
		changed = prev != nil && !maps.Equal(prev.Labels, labels)
		return w.PutNamespace(&memstore.Namespace{Name: name, Labels: labels})
	}); err != nil {
		// Only on a schema bug (see forgetResource); its next event stores it.
		logr.FromContextOrDiscard(ctx).Error(err, "storing a namespace failed", "namespace", name)
		return
	}
	if !changed {
		return
	}
	// namespaceSelector results of the namespace's resources may change.
	resources, _ := s.store.Read().ResourcesInNamespace(name)
	for _, r := range resources {
		s.queue.Add(r.UID)
	}
}
