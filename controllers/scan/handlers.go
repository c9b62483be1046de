package scan

import (
	"context"
	"maps"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

// handlers are the scanner's watch handlers, its lowest layer: they only
// store and enqueue. A resource or namespace is stored (the store is the
// scanner's cache of the cluster, as an informer's indexer) and its UID
// queued for the evaluation workers; a control event (a policy, an
// exception, an admission policy or binding) is queued for the policy
// reconciler (control.go). They also hold what a stored change enqueues
// (the resources of a kind, of a policy, of some results).
type handlers struct {
	store    *memstore.Store
	queue    *watch.Queue
	control  *controlQueue
	kinds    *kindWatch
	policies *policySet
	metrics  *metrics
	// reports are asked which resources have a report (sweepOrphans).
	reports *reportWriter
	// shard, when set, is the namespaces this replica scans (Options.Shard).
	shard func(namespace string) bool
	// deferred holds the resources met before the policies were listed;
	// they are queued once, when the policies are (reconcile.go).
	deferred deferredSet
}

var _ watch.StreamingSink = (*handlers)(nil)

// StreamsLists: listed objects arrive one by one through Upsert, and Replace
// receives stubs (see watch.StreamingSink), so that a large kind is never
// held whole in memory while it is listed.
func (h *handlers) StreamsLists() {}

// Upsert records a changed object: a control event is queued (control.go);
// a resource or namespace is stored and its UID queued.
func (h *handlers) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isControlKind(gvr) {
		h.control.event(gvr, u, false)
		return
	}
	if gvr == apiresources.Namespace {
		h.upsertNamespace(ctx, u)
		h.kinds.namespaceSeen(u.GetName())
		if !h.kinds.needed(gvr) {
			return
		}
	}
	if !h.owns(u.GetNamespace()) {
		return // another replica's shard (a kind watched across namespaces)
	}
	h.upsertResource(ctx, gvr, u)
}

// owns reports whether a namespace ("": cluster-scoped resources) is in
// this replica's shard (always, unsharded).
func (h *handlers) owns(namespace string) bool {
	return h.shard == nil || h.shard(namespace)
}

// Remove records a deleted object, as Upsert does.
func (h *handlers) Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isControlKind(gvr) {
		h.control.event(gvr, u, true)
		return
	}
	if gvr == apiresources.Namespace {
		if err := h.store.Write(func(w *memstore.WriteTxn) error { return w.DeleteNamespace(u.GetName()) }); err != nil {
			// Only the labels of a namespace no resource is in any more
			// stay behind: nothing is evaluated against them.
			logr.FromContextOrDiscard(ctx).Error(err, "forgetting a deleted namespace failed", "namespace", u.GetName())
		}
		h.kinds.namespaceGone(u.GetName())
	}
	h.forgetResource(ctx, string(u.GetUID()))
}

// forgetResource drops a resource and its results from the store; its
// reconcile then deletes its report.
func (h *handlers) forgetResource(ctx context.Context, uid string) {
	var gone []memstore.Result
	if err := h.store.Write(func(w *memstore.WriteTxn) (err error) {
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
		h.metrics.count(gone, -1)
	}
	h.queue.Add(uid) // reconcile finds it gone and deletes its report
}

// Replace removes what is not in a complete list; the objects themselves
// were delivered through Upsert already (objs are stubs).
func (h *handlers) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	if isControlKind(gvr) {
		h.control.list(gvr, objs)
		return
	}
	h.replaceIn(ctx, gvr, "", objs)
}

// replaceIn removes what is not in a complete list of one namespace ("":
// all).
func (h *handlers) replaceIn(ctx context.Context, gvr schema.GroupVersionResource, namespace string, objs []*unstructured.Unstructured) {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[string(u.GetUID())] = true
	}
	group, kind := h.kinds.groupKind(gvr)
	if kind == "" {
		return
	}
	stale, _ := h.store.Read().ResourcesOfKind(group, kind, namespace)
	for _, r := range stale {
		if !present[r.UID] {
			h.Remove(ctx, gvr, &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"uid": r.UID, "name": r.Name, "namespace": r.Namespace}}})
		}
	}
}

// Listed records the end of a kind's first list; for a control kind, once
// the list is applied (control.go).
func (h *handlers) Listed(ctx context.Context, gvr schema.GroupVersionResource) {
	if isControlKind(gvr) {
		h.control.endOfList(gvr)
		return
	}
	h.listedIn(gvr, "")
}

// listedIn marks a kind listed in a namespace ("": all); once every watch
// has listed, the reports of resources not seen go.
func (h *handlers) listedIn(gvr schema.GroupVersionResource, namespace string) {
	all := h.kinds.listed(gvr, namespace)
	if h.kinds.policiesListed() {
		h.releaseDeferred()
	}
	if all {
		h.sweepOrphans()
	}
}

// sweepOrphans enqueues the reports whose resource is not in the store, so
// that reports of resources deleted while tally was down go.
func (h *handlers) sweepOrphans() {
	r := h.store.Read()
	for _, uid := range h.reports.known() {
		if res, err := r.Resource(uid); err == nil && res == nil {
			h.queue.Add(uid)
		}
	}
}

func (h *handlers) upsertResource(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	res, err := compact(u)
	if err != nil {
		// A resource that cannot be read is final until it changes.
		logr.FromContextOrDiscard(ctx).Error(err, "a resource could not be read; skipped", "gvr", gvr.String(), "uid", u.GetUID())
		return
	}
	h.kinds.remember(gvr, res.Group, res.Kind)
	changed := true
	err = h.store.Write(func(w *memstore.WriteTxn) error {
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
		h.queue.Add(res.UID)
	}
}

func (h *handlers) upsertNamespace(ctx context.Context, u *unstructured.Unstructured) {
	name := u.GetName()
	labels := u.GetLabels()
	changed := false
	if err := h.store.Write(func(w *memstore.WriteTxn) error {
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
	resources, _ := h.store.Read().ResourcesInNamespace(name)
	for _, r := range resources {
		h.queue.Add(r.UID)
	}
}

// resultsOfRules adds to todo the resources with results of some rules of a
// policy: a rule that no longer matches them must drop its entry.
func (h *handlers) resultsOfRules(todo map[string]bool, policy string, changed map[string]bool, removed []string) {
	rules := map[string]bool{}
	for r := range changed {
		rules[r] = true
	}
	for _, r := range removed {
		rules[r] = true
	}
	tp := h.policies.get(policy)
	// A CEL policy has one unit but results of several rules ("",
	// exception, evaluation): every one of them may have to go.
	whole := tp != nil && tp.compiled.CEL()
	results, _ := h.store.Read().ResultsOfPolicy(policy)
	for _, r := range results {
		if whole || rules[r.Value().Rule] {
			todo[r.UID] = true
		}
	}
}

// matching adds to todo the stored resources of some kinds that a rule's
// match/exclude selects (an index read by kind, then the compiled matcher).
func (h *handlers) matching(todo map[string]bool, rule *engine.Unit, gvrs []schema.GroupVersionResource, namespace string) {
	r := h.store.Read()
	h.eachStored(r, gvrs, namespace, func(gvr schema.GroupVersionResource, res *memstore.Resource) {
		var nsLabels map[string]string
		if ns, _ := r.Namespace(res.Namespace); ns != nil {
			nsLabels = ns.Labels
		}
		head, err := headOf(res)
		if err != nil {
			return // undecodable: nothing to match (it failed when stored)
		}
		if rule.Applies(head, nsLabels, gvr) {
			todo[res.UID] = true
		}
	})
}

// eachStored calls fn with each stored resource of some kinds (in one
// namespace, "": all), read from r. A kind not listed yet has none: its
// first list enqueues everything.
func (h *handlers) eachStored(r *memstore.ReadTxn, gvrs []schema.GroupVersionResource, namespace string, fn func(schema.GroupVersionResource, *memstore.Resource)) {
	for _, gvr := range gvrs {
		group, kind := h.kinds.groupKind(gvr)
		if kind == "" {
			continue
		}
		resources, _ := r.ResourcesOfKind(group, kind, namespace)
		for _, res := range resources {
			fn(gvr, res)
		}
	}
}

// enqueuePolicies enqueues every resource the named policies can match.
func (h *handlers) enqueuePolicies(names []string) {
	for _, n := range names {
		for _, tp := range h.policies.resolve(n) {
			h.enqueueKinds(tp.kinds(), tp.compiled.Namespace)
		}
	}
}

// enqueueKinds enqueues the stored resources of some kinds (in one namespace
// for a namespaced Policy).
func (h *handlers) enqueueKinds(gvrs []schema.GroupVersionResource, namespace string) {
	h.eachStored(h.store.Read(), gvrs, namespace, func(_ schema.GroupVersionResource, res *memstore.Resource) { h.queue.Add(res.UID) })
}

// deferredSet is the set of resources waiting for the policies' first
// list; each is queued once when they are listed.
type deferredSet struct {
	mu   sync.Mutex
	uids map[string]struct{}
}

func (d *deferredSet) add(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.uids == nil {
		d.uids = map[string]struct{}{}
	}
	d.uids[uid] = struct{}{}
}

func (d *deferredSet) remove(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.uids, uid)
}

// take empties the set and returns what it held.
func (d *deferredSet) take() map[string]struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	uids := d.uids
	d.uids = nil
	return uids
}

// releaseDeferred queues the resources that waited for the policies.
func (h *handlers) releaseDeferred() {
	for uid := range h.deferred.take() {
		h.queue.Add(uid)
	}
}

// synced reports whether the policies and every kind they need were listed
// once and applied, and the queues are empty: the reports reflect the
// cluster. The control queue is asked first: what it applies may need
// kinds not listed yet.
func (h *handlers) synced() bool {
	return h.control.queue.Idle() && h.kinds.listedAll() && h.queue.Idle()
}
