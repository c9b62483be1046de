package scan

import (
	"context"

	"github.com/go-logr/logr"

	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

// trackedPolicy is what the scanner knows of a policy it scans.
type trackedPolicy struct {
	// name is the policy's key (apiresources.PolicyKey).
	name string
	gvr  schema.GroupVersionResource
	// ref refers to the policy object, for Events.
	ref        *corev1.ObjectReference
	compiled   *engine.Policy
	units      map[string]engine.Unit
	ruleHashes map[string]uint64
	// ruleKinds are the kinds each rule can match.
	ruleKinds map[string][]schema.GroupVersionResource
	schedule  schedule
	// background is false for policies kept only for admission.
	background bool
}

// readPolicy converts and compiles a policy object (through the catalog
// the admission bridge shares; a Validating- or MutatingAdmissionPolicy
// with its bindings); spec is nil for CEL policies.
func (s *Scanner) readPolicy(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) (runtime.Object, *engine.Policy, *kyvernov1.Spec, error) {
	switch gvr {
	case apiresources.ValidatingAdmissionPolicy:
		obj, compiled, err := s.vaps.read(ctx, u)
		return obj, compiled, nil, err
	case apiresources.MutatingAdmissionPolicy:
		obj, compiled, err := s.maps.read(ctx, u)
		return obj, compiled, nil, err
	}
	p, err := s.opts.Catalog.Read(gvr, u)
	if p == nil {
		return nil, nil, nil, err
	}
	return p.Object, p.Compiled, p.Spec, err
}

// ruleHashes hashes each validate rule together with the policy-level
// settings that change its results, so that a status-only or cosmetic update
// changes nothing and an edit of one rule changes one hash.
func ruleHashes(p *engine.Policy, units []engine.Unit) map[string]uint64 {
	shared, _ := json.Marshal([]any{p.Scored, p.Category, p.Severity, p.Spec.ApplyRules, p.Namespace})
	out := make(map[string]uint64, len(units))
	for _, u := range units {
		data, _ := json.Marshal(u.Raw) // plain API types: cannot fail
		h := fnv.New64a()              // a hash.Hash's Write never returns an error
		_, _ = h.Write(shared)
		_, _ = h.Write(data)
		out[u.Name] = h.Sum64()
	}
	return out
}

// upsertPolicy applies a created or changed policy: compiled, stored, its
// kinds watched and the resources its changed rules can match queued. A
// policy that cannot be scanned is rejected (reported on it, its results
// dropped): that is final until it is edited, not an error. The error is a
// store write that failed; the control queue retries it, and nothing of the
// policy's new version was kept before it.
func (s *Scanner) upsertPolicy(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	name := apiresources.PolicyKey(gvr, u.GetNamespace(), u.GetName())
	log := logr.FromContextOrDiscard(ctx).WithValues("policy", name)
	obj, compiled, spec, err := s.readPolicy(ctx, gvr, u)
	if err == nil && spec != nil {
		err = engine.Malformed(compiled)
	}
	if err == nil && spec != nil && spec.BackgroundEnabled() {
		err = engine.ValidateBackground(spec)
	}
	var sched schedule
	if err == nil {
		sched, err = scheduleOf(u.GetAnnotations(), s.opts.Interval)
	}
	if err != nil {
		log.Error(err, "policy rejected; its other results are kept out and the other policies go on")
		s.metrics.policyErrors.WithLabelValues(name, "invalid").Inc()
		if s.opts.Recorder != nil && obj != nil {
			s.opts.Recorder.Eventf(obj, corev1.EventTypeWarning, "PolicyRejected", "tally cannot scan this policy: %v", err)
		}
		if rerr := s.removePolicy(ctx, name); rerr != nil {
			return rerr
		}
		s.setPolicyStatus(ctx, gvr, u, err, "", false)
		return nil
	}
	var scanned []schema.GroupVersionResource // the kinds the policy is scanned on
	applied := false
	defer func() {
		if !applied {
			return // retried: the status is written once it is applied
		}
		var more []Condition
		if gvr == apiresources.ValidatingPolicy || gvr == apiresources.NamespacedValidatingPolicy {
			more = CELConditions(compiled.AdmissionEnabled(), s.kinds.forbiddenOf(scanned))
		}
		s.tellLeftOut(obj, compiled)
		s.setPolicyStatus(ctx, gvr, u, leftOutError(compiled), loadedMessage(compiled), compiled.AdmissionEnabled(), more...)
	}()
	if !compiled.BackgroundEnabled() {
		// R19: background entries go when background is turned off.
		if err := s.removePolicy(ctx, name); err != nil {
			return err
		}
		s.policies.put(&trackedPolicy{name: name, gvr: gvr, ref: refOf(u), compiled: compiled})
		applied = true
		return nil
	}
	tp := newTracked(name, gvr, compiled)
	tp.ref, tp.schedule = refOf(u), sched
	var kindErrs []error
	for _, unit := range tp.units {
		var gvrs []schema.GroupVersionResource
		var err error
		if unit.Resources != nil {
			gvrs, err = s.kinds.resolveResources(unit.Resources)
		} else {
			gvrs, err = s.kinds.resolveKinds(unit.Kinds)
		}
		if err != nil && unit.Name != "" {
			err = fmt.Errorf("rule %s: %w", unit.Name, err)
		}
		if err != nil {
			kindErrs = append(kindErrs, err)
		}
		tp.ruleKinds[unit.Name] = gvrs
	}
	if err := errors.Join(kindErrs...); err != nil {
		log.Error(err, "some kinds of the policy cannot be scanned")
		if s.opts.Recorder != nil {
			s.opts.Recorder.Eventf(obj, corev1.EventTypeWarning, "KindUnavailable", "tally cannot scan some kinds: %v", err)
		}
	}

	prev := s.policies.get(name)
	if prev != nil && !prev.background {
		prev = nil // it was not scanned: every rule is new to the scan
	}

	// Which rules changed: new, edited or removed.
	changed := map[string]bool{}
	for rule, h := range tp.ruleHashes {
		if prev == nil || prev.ruleHashes[rule] != h {
			changed[rule] = true
		}
	}
	var removedRules []string
	if prev != nil {
		for rule := range prev.ruleHashes {
			if _, ok := tp.ruleHashes[rule]; !ok {
				removedRules = append(removedRules, rule)
			}
		}
	}
	if err := s.store.Write(func(w *memstore.WriteTxn) error {
		return w.PutPolicy(&memstore.Policy{Name: name, ReportName: compiled.Name, Source: compiled.Source,
			Namespace: compiled.Namespace, ResourceVersion: u.GetResourceVersion(),
			Background: true})
	}); err != nil {
		return fmt.Errorf("storing policy %s: %w", name, err)
	}
	s.policies.put(tp)
	applied = true
	scanned = tp.kinds()
	s.ensureKinds(ctx, name, scanned)
	if len(changed) == 0 && len(removedRules) == 0 {
		return nil // a status-only or cosmetic update
	}
	// Resources a changed rule can match now, and those it had results for.
	// Collected first, enqueued once: a resource added while a worker
	// already evaluates it would be evaluated twice.
	todo := map[string]bool{}
	for rule := range changed {
		unit := tp.units[rule]
		s.matching(todo, &unit, tp.ruleKinds[rule], compiled.Namespace)
	}
	s.resultsOfRules(todo, name, changed, removedRules)
	for uid := range todo {
		s.queue.Add(uid)
	}
	return nil
}

// ensureKinds records that a policy needs exactly gvrs (kindWatch.need):
// a kind it may not list is reported on the policy; the stored objects of a
// kind no longer watched are forgotten.
func (s *Scanner) ensureKinds(ctx context.Context, policy string, gvrs []schema.GroupVersionResource) {
	refused, stopped := s.kinds.need(ctx, policy, gvrs)
	for g, err := range refused {
		logr.FromContextOrDiscard(ctx).Error(err, "a kind the policies need cannot be read", "gvr", g.String())
		s.metrics.kindErrors.WithLabelValues(g.String()).Inc()
		if tp := s.policies.get(policy); tp != nil && tp.ref != nil && s.opts.ReadEvents != nil {
			s.opts.ReadEvents.Eventf(tp.ref, corev1.EventTypeWarning, "KindForbidden", "tally cannot list %s: %v", g.String(), err)
		}
	}
	for _, g := range stopped {
		group, kind := s.kinds.groupKind(g)
		stale, _ := s.store.Read().ResourcesOfKind(group, kind, "")
		for _, r := range stale {
			s.forgetResource(ctx, r.UID)
		}
	}
}

// newTracked is a scanned policy with its units and their hashes (the
// kinds each can match are resolved by the caller).
func newTracked(name string, gvr schema.GroupVersionResource, compiled *engine.Policy) *trackedPolicy {
	units := compiled.Units()
	tp := &trackedPolicy{name: name, gvr: gvr, compiled: compiled, ruleHashes: ruleHashes(compiled, units),
		units: make(map[string]engine.Unit, len(units)), ruleKinds: map[string][]schema.GroupVersionResource{}, background: true}
	for _, u := range units {
		tp.units[u.Name] = u
	}
	return tp
}

func (tp *trackedPolicy) kinds() []schema.GroupVersionResource {
	seen := map[schema.GroupVersionResource]bool{}
	var out []schema.GroupVersionResource
	for _, gvrs := range tp.ruleKinds {
		for _, g := range gvrs {
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	return out
}

// removePolicy forgets a policy: its results go, and the reports of the
// resources it had results for are rewritten.
func (s *Scanner) removePolicy(ctx context.Context, name string) error {
	tracked := s.policies.get(name) != nil
	affected, _ := s.store.Read().ResultsOfPolicy(name)
	if !tracked && len(affected) == 0 {
		return nil
	}
	if err := s.store.Write(func(w *memstore.WriteTxn) error { return w.DeletePolicy(name) }); err != nil {
		return fmt.Errorf("forgetting policy %s: %w", name, err)
	}
	s.policies.remove(name)
	for _, r := range affected {
		s.countResults([]memstore.Result{r.Result}, -1)
		s.queue.Add(r.UID)
	}
	s.ensureKinds(ctx, name, nil)
	return nil
}

// dropMissingPolicies forgets the policies of a kind that a complete list
// of it does not hold.
func (s *Scanner) dropMissingPolicies(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) error {
	present := map[string]bool{}
	for _, u := range objs {
		present[apiresources.PolicyKey(gvr, u.GetNamespace(), u.GetName())] = true
	}
	var errs []error
	for _, name := range s.policies.keysOf(gvr) {
		switch {
		case present[name]:
		case gvr == apiresources.ValidatingAdmissionPolicy:
			errs = append(errs, s.vaps.remove(ctx, strings.TrimPrefix(name, apiresources.VAPKeyPrefix)))
		case gvr == apiresources.MutatingAdmissionPolicy:
			errs = append(errs, s.maps.remove(ctx, strings.TrimPrefix(name, apiresources.MAPKeyPrefix)))
		default:
			errs = append(errs, s.removePolicy(ctx, name))
		}
	}
	return errors.Join(errs...)
}

// resultsOfRules adds to todo the resources with results of some rules of a
// policy: a rule that no longer matches them must drop its entry.
func (s *Scanner) resultsOfRules(todo map[string]bool, policy string, changed map[string]bool, removed []string) {
	rules := map[string]bool{}
	for r := range changed {
		rules[r] = true
	}
	for _, r := range removed {
		rules[r] = true
	}
	tp := s.policies.get(policy)
	// A CEL policy has one unit but results of several rules ("",
	// exception, evaluation): every one of them may have to go.
	whole := tp != nil && tp.compiled.CEL()
	results, _ := s.store.Read().ResultsOfPolicy(policy)
	for _, r := range results {
		if whole || rules[r.Value().Rule] {
			todo[r.UID] = true
		}
	}
}

// matching adds to todo the stored resources of some kinds that a rule's
// match/exclude selects (an index read by kind, then the compiled matcher).
func (s *Scanner) matching(todo map[string]bool, rule *engine.Unit, gvrs []schema.GroupVersionResource, namespace string) {
	r := s.store.Read()
	for _, gvr := range gvrs {
		group, kind := s.kinds.groupKind(gvr)
		if kind == "" {
			continue // not listed yet: its first list enqueues everything
		}
		resources, _ := r.ResourcesOfKind(group, kind, namespace)
		for _, res := range resources {
			var nsLabels map[string]string
			if ns, _ := r.Namespace(res.Namespace); ns != nil {
				nsLabels = ns.Labels
			}
			head, err := headOf(res)
			if err != nil {
				continue // undecodable: nothing to match (it failed when stored)
			}
			if rule.Applies(head, nsLabels, gvr) {
				todo[res.UID] = true
			}
		}
	}
}

// enqueuePolicies enqueues every resource the named policies can match.
func (s *Scanner) enqueuePolicies(names []string) {
	for _, n := range names {
		for _, tp := range s.policies.resolve(n) {
			s.enqueueKinds(tp.kinds(), tp.compiled.Namespace)
		}
	}
}

// enqueueKinds enqueues the stored resources of some kinds (in one namespace
// for a namespaced Policy).
func (s *Scanner) enqueueKinds(gvrs []schema.GroupVersionResource, namespace string) {
	r := s.store.Read()
	for _, gvr := range gvrs {
		group, kind := s.kinds.groupKind(gvr)
		if kind == "" {
			continue // not listed yet: its first list enqueues everything
		}
		resources, _ := r.ResourcesOfKind(group, kind, namespace)
		for _, res := range resources {
			s.queue.Add(res.UID)
		}
	}
}

// refOf refers to an object, for Events.
func refOf(u *unstructured.Unstructured) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(),
		Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}
}
