package scan

import (
	"context"
	"maps"
	"slices"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
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

func (s *Scanner) log() logr.Logger {
	return logr.FromContextOrDiscard(s.kinds.context())
}

func (s *Scanner) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	switch gvr {
	case apiresources.ClusterPolicy, apiresources.Policy, apiresources.ValidatingPolicy, apiresources.NamespacedValidatingPolicy:
		s.upsertPolicy(gvr, u)
		return
	case apiresources.PolicyException:
		s.upsertException(u)
		return
	case apiresources.CELPolicyException:
		s.upsertCELException(u)
		return
	case apiresources.ValidatingAdmissionPolicy:
		s.upsertVAP(u)
		return
	case apiresources.ValidatingAdmissionPolicyBinding:
		s.upsertBinding(u.GetName(), u)
		return
	case apiresources.Namespace:
		s.upsertNamespace(u)
		if !s.kinds.needed(gvr) {
			return
		}
	}
	s.upsertResource(gvr, u)
}

func (s *Scanner) Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	switch gvr {
	case apiresources.ClusterPolicy, apiresources.Policy, apiresources.ValidatingPolicy, apiresources.NamespacedValidatingPolicy:
		name := apiresources.PolicyKey(gvr, u.GetNamespace(), u.GetName())
		s.removePolicy(name)
		// A deleted policy keeps no series (its results' go with them).
		s.metrics.policyErrors.DeletePartialMatch(prometheus.Labels{labelPolicy: name})
		return
	case apiresources.PolicyException:
		s.removeException(u.GetNamespace() + "/" + u.GetName())
		return
	case apiresources.CELPolicyException:
		s.removeException(celExceptionKey(u.GetNamespace(), u.GetName()))
		return
	case apiresources.ValidatingAdmissionPolicy:
		s.removeVAP(u.GetName())
		return
	case apiresources.ValidatingAdmissionPolicyBinding:
		s.upsertBinding(u.GetName(), nil)
		return
	case apiresources.Namespace:
		if err := s.store.Write(func(w *memstore.WriteTxn) error { return w.DeleteNamespace(u.GetName()) }); err != nil {
			s.log().Error(err, "forgetting a deleted namespace failed", "namespace", u.GetName())
		}
	}
	s.forgetResource(string(u.GetUID()))
}

// forgetResource drops a resource and its results from the store; its
// reconcile then deletes its report.
func (s *Scanner) forgetResource(uid string) {
	var gone []memstore.Result
	if err := s.store.Write(func(w *memstore.WriteTxn) (err error) {
		if gone, err = w.Results(uid); err != nil {
			return err
		}
		return w.DeleteResource(uid)
	}); err != nil {
		s.log().Error(err, "forgetting a deleted resource failed", "uid", uid)
	} else {
		s.countResults(gone, -1)
	}
	s.queue.Add(uid) // reconcile finds it gone and deletes its report
}

// Replace removes what is not in a complete list; the objects themselves
// were delivered through Upsert already (objs are stubs).
func (s *Scanner) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[string(u.GetUID())] = true
	}
	switch gvr {
	case apiresources.ClusterPolicy, apiresources.Policy, apiresources.PolicyException, apiresources.ValidatingPolicy, apiresources.NamespacedValidatingPolicy, apiresources.CELPolicyException, apiresources.ValidatingAdmissionPolicy:
		s.dropMissingPolicies(gvr, objs)
		return
	case apiresources.ValidatingAdmissionPolicyBinding:
		s.dropMissingBindings(objs)
		return
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

func (s *Scanner) Listed(ctx context.Context, gvr schema.GroupVersionResource) {
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

func (s *Scanner) upsertResource(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	res, err := compact(u)
	if err != nil {
		s.log().Error(err, "a resource could not be read; skipped", "gvr", gvr.String(), "uid", u.GetUID())
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
		s.log().Error(err, "storing a resource failed", "uid", res.UID)
		return
	}
	if changed {
		s.queue.Add(res.UID)
	}
}

func (s *Scanner) upsertNamespace(u *unstructured.Unstructured) {
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
		s.log().Error(err, "storing a namespace failed", "namespace", name)
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

func (s *Scanner) upsertException(u *unstructured.Unstructured) {
	name := u.GetNamespace() + "/" + u.GetName()
	var pe kyvernov2.PolicyException
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pe); err != nil {
		s.log().Error(err, "PolicyException could not be read; ignored", "name", name)
		s.removeException(name) // its previous version no longer applies either
		return
	}
	ex, err := engine.CompileException(&pe)
	if err != nil {
		s.log().Error(err, "PolicyException is invalid; ignored", "name", name)
		s.removeException(name)
		return
	}
	policies := make([]string, 0, len(pe.Spec.Exceptions))
	for _, e := range pe.Spec.Exceptions {
		policies = append(policies, e.PolicyName)
	}
	s.storeException(name, policies, ex)
}

// storeException stores a compiled PolicyException (kyverno.io or CEL) and
// rescans the policies of its previous version too: the resources it no
// longer exempts must lose their skip.
func (s *Scanner) storeException(name string, policies []string, compiled any) {
	before, _ := s.exceptionPolicies(name)
	if err := s.store.Write(func(w *memstore.WriteTxn) error {
		return w.PutException(&memstore.Exception{Name: name, Policies: policies, Compiled: compiled})
	}); err != nil {
		s.log().Error(err, "storing a PolicyException failed", "name", name)
		return
	}
	s.enqueuePolicies(union(before, policies))
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

func (s *Scanner) removeException(name string) {
	policies, stored := s.exceptionPolicies(name)
	if !stored {
		return // nothing it exempted
	}
	if err := s.store.Write(func(w *memstore.WriteTxn) error { return w.DeleteException(name) }); err != nil {
		s.log().Error(err, "forgetting a PolicyException failed", "name", name)
		return
	}
	s.enqueuePolicies(policies)
}
