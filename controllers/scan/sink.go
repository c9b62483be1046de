package scan

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
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
		s.queueEvent(gvr, u, false)
		return
	}
	if gvr == apiresources.Namespace {
		s.upsertNamespace(ctx, u)
		if !s.kinds.needed(gvr) {
			return
		}
	}
	s.upsertResource(ctx, gvr, u)
}

// Remove records a deleted object, as Upsert does.
func (s *Scanner) Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isControlKind(gvr) {
		s.queueEvent(gvr, u, true)
		return
	}
	if gvr == apiresources.Namespace {
		if err := s.store.Write(func(w *memstore.WriteTxn) error { return w.DeleteNamespace(u.GetName()) }); err != nil {
			// Only the labels of a namespace no resource is in any more
			// stay behind: nothing is evaluated against them.
			logr.FromContextOrDiscard(ctx).Error(err, "forgetting a deleted namespace failed", "namespace", u.GetName())
		}
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
		s.queueReplace(gvr, objs)
		return
	}
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[string(u.GetUID())] = true
	}
	group, kind := s.kinds.groupKind(gvr)
	if kind == "" {
		return
	}
	stale, _ := s.store.Read().ResourcesOfKind(group, kind, "")
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
		s.control.Add(keyListed + gvr.String())
		return
	}
	s.listed(gvr)
}

// listed marks a kind listed; once every kind is, the reports of resources
// not seen go.
func (s *Scanner) listed(gvr schema.GroupVersionResource) {
	if s.kinds.listed(gvr) {
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

func (s *Scanner) upsertException(ctx context.Context, u *unstructured.Unstructured) error {
	name := u.GetNamespace() + "/" + u.GetName()
	var pe kyvernov2.PolicyException
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pe)
	var ex *engine.Exception
	if err == nil {
		ex, err = engine.CompileException(&pe)
	}
	if err != nil {
		// An invalid exception is final until it is edited: nothing to retry.
		logr.FromContextOrDiscard(ctx).Error(err, "PolicyException is invalid; ignored", "name", name)
		return s.removeException(name) // its previous version no longer applies either
	}
	policies := make([]string, 0, len(pe.Spec.Exceptions))
	for _, e := range pe.Spec.Exceptions {
		policies = append(policies, e.PolicyName)
	}
	return s.storeException(name, policies, ex)
}

// storeException stores a compiled PolicyException (kyverno.io or CEL) and
// rescans the policies of its previous version too: the resources it no
// longer exempts must lose their skip.
func (s *Scanner) storeException(name string, policies []string, compiled any) error {
	before, _ := s.exceptionPolicies(name)
	if err := s.store.Write(func(w *memstore.WriteTxn) error {
		return w.PutException(&memstore.Exception{Name: name, Policies: policies, Compiled: compiled})
	}); err != nil {
		return fmt.Errorf("storing PolicyException %s: %w", name, err)
	}
	s.enqueuePolicies(union(before, policies))
	return nil
}

// exceptionPolicies returns the policies a stored PolicyException names;
// stored is false when it is not stored.
func (s *Scanner) exceptionPolicies(name string) (policies []string, stored bool) {
	all, err := s.store.Read().Exceptions()
	if err != nil {
		return nil, false // a read of the in-memory store fails only on a schema bug
	}
	for _, e := range all {
		if e.Name == name {
			return e.Policies, true
		}
	}
	return nil, false
}

// union returns the names of a and b, once each.
func union(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, n := range append(slices.Clip(a), b...) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func (s *Scanner) removeException(name string) error {
	policies, stored := s.exceptionPolicies(name)
	if !stored {
		return nil // nothing it exempted
	}
	if err := s.store.Write(func(w *memstore.WriteTxn) error { return w.DeleteException(name) }); err != nil {
		return fmt.Errorf("forgetting PolicyException %s: %w", name, err)
	}
	s.enqueuePolicies(policies)
	return nil
}
