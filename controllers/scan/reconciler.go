package scan

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

// policyReconciler applies the changes of what the scan evaluates with,
// read from the control queue one at a time (control.go): policies of
// every kind, PolicyExceptions (exceptionSet), admission policies and
// their bindings (admissionPolicySet). A policy is compiled (through the
// catalog the admission bridge shares), kept in the policy set and the
// store, its kinds watched, its status written, and the resources its
// changed rules can match enqueued for the evaluation workers. It holds
// nothing of the layers above it.
type policyReconciler struct {
	opts     *Options
	client   dynamic.Interface
	store    *memstore.Store
	policies *policySet
	kinds    *kindWatch
	handlers *handlers
	metrics  *metrics
	// exceptions applies the PolicyExceptions' changes; admissionPolicies
	// are the Kubernetes admission policies scanned with their bindings,
	// a set per kind (catalog.AdmissionPolicy), by the policy's and the
	// binding's GVR.
	exceptions        *exceptionSet
	admissionPolicies map[schema.GroupVersionResource]*admissionPolicySet
	// leftOutTold: the generation of each policy whose rules left out were
	// told in an Event (status.go tellLeftOut).
	leftOutTold sync.Map
	// statusWrites counts the goroutines writing policy status (status.go);
	// running says the scanner runs (status is written only then).
	statusWrites sync.WaitGroup
	running      atomic.Bool
}

// readPolicy converts and compiles a policy object (through the catalog
// the admission bridge shares; a Validating- or MutatingAdmissionPolicy
// with its bindings); spec is nil for CEL policies.
func (pr *policyReconciler) readPolicy(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) (runtime.Object, *engine.Policy, *kyvernov1.Spec, error) {
	if as := pr.admissionPolicies[gvr]; as != nil {
		obj, compiled, err := as.read(ctx, u)
		return obj, compiled, nil, err
	}
	p, err := pr.opts.Catalog.Read(gvr, u)
	if p == nil {
		return nil, nil, nil, err
	}
	return p.Object, p.Compiled, p.Spec, err
}

// upsertPolicy applies a created or changed policy: compiled, stored, its
// kinds watched and the resources its changed rules can match queued. A
// policy that cannot be scanned is rejected (reported on it, its results
// dropped): that is final until it is edited, not an error. The error is a
// store write that failed; the control queue retries it, and nothing of the
// policy's new version was kept before it.
func (pr *policyReconciler) upsertPolicy(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	name := catalog.Key(gvr, u.GetNamespace(), u.GetName())
	log := logr.FromContextOrDiscard(ctx).WithValues("policy", name)
	obj, compiled, spec, err := pr.readPolicy(ctx, gvr, u)
	if err == nil && spec != nil {
		err = engine.Malformed(compiled)
	}
	if err == nil && spec != nil && spec.BackgroundEnabled() {
		err = engine.ValidateBackground(spec)
	}
	var sched schedule
	if err == nil {
		sched, err = scheduleOf(u.GetAnnotations(), pr.opts.Interval)
	}
	if err != nil {
		log.Error(err, "policy rejected; its other results are kept out and the other policies go on")
		pr.metrics.policyErrors.WithLabelValues(name, "invalid").Inc()
		if pr.opts.Recorder != nil && obj != nil {
			pr.opts.Recorder.Eventf(obj, corev1.EventTypeWarning, "PolicyRejected", "tally cannot scan this policy: %v", err)
		}
		if rerr := pr.removePolicy(ctx, name); rerr != nil {
			return rerr
		}
		pr.setPolicyStatus(ctx, gvr, u, err, "", false)
		return nil
	}
	var scanned []schema.GroupVersionResource // the kinds the policy is scanned on
	applied := false
	defer func() {
		if !applied {
			return // retried: the status is written once it is applied
		}
		var more []Condition
		if k, ok := catalog.KindOf(gvr); ok && k.ReadyConditions {
			more = CELConditions(compiled.AdmissionEnabled(), pr.kinds.forbiddenOf(scanned))
		}
		pr.tellLeftOut(obj, compiled)
		pr.setPolicyStatus(ctx, gvr, u, leftOutError(compiled), loadedMessage(compiled), compiled.AdmissionEnabled(), more...)
	}()
	if !compiled.BackgroundEnabled() {
		// R19: background entries go when background is turned off.
		if err := pr.removePolicy(ctx, name); err != nil {
			return err
		}
		pr.policies.put(&trackedPolicy{name: name, gvr: gvr, ref: refOf(u), compiled: compiled})
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
			gvrs, err = pr.kinds.resolveResources(unit.Resources)
		} else {
			gvrs, err = pr.kinds.resolveKinds(unit.Kinds)
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
		if pr.opts.Recorder != nil {
			pr.opts.Recorder.Eventf(obj, corev1.EventTypeWarning, "KindUnavailable", "tally cannot scan some kinds: %v", err)
		}
	}

	prev := pr.policies.get(name)
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
	if err := pr.store.Write(func(w *memstore.WriteTxn) error {
		return w.PutPolicy(&memstore.Policy{Name: name, ReportName: compiled.Name, Source: compiled.Source,
			Namespace: compiled.Namespace, ResourceVersion: u.GetResourceVersion(),
			Background: true})
	}); err != nil {
		return fmt.Errorf("storing policy %s: %w", name, err)
	}
	pr.policies.put(tp)
	applied = true
	scanned = tp.kinds()
	pr.ensureKinds(ctx, name, scanned)
	if len(changed) == 0 && len(removedRules) == 0 {
		return nil // a status-only or cosmetic update
	}
	// Resources a changed rule can match now, and those it had results for.
	// Collected first, enqueued once: a resource added while a worker
	// already evaluates it would be evaluated twice.
	todo := map[string]bool{}
	for rule := range changed {
		unit := tp.units[rule]
		pr.handlers.matching(todo, &unit, tp.ruleKinds[rule], compiled.Namespace)
	}
	pr.handlers.resultsOfRules(todo, name, changed, removedRules)
	for uid := range todo {
		pr.handlers.queue.Add(uid)
	}
	return nil
}

// ensureKinds records that a policy needs exactly gvrs (kindWatch.need):
// a kind it may not list is reported on the policy; the stored objects of a
// kind no longer watched are forgotten.
func (pr *policyReconciler) ensureKinds(ctx context.Context, policy string, gvrs []schema.GroupVersionResource) {
	refused, stopped := pr.kinds.need(ctx, policy, gvrs)
	for g, err := range refused {
		logr.FromContextOrDiscard(ctx).Error(err, "a kind the policies need cannot be read", "gvr", g.String())
		pr.metrics.kindErrors.WithLabelValues(g.String()).Inc()
		if tp := pr.policies.get(policy); tp != nil && tp.ref != nil && pr.opts.ReadEvents != nil {
			pr.opts.ReadEvents.Eventf(tp.ref, corev1.EventTypeWarning, "KindForbidden", "tally cannot list %s: %v", g.String(), err)
		}
	}
	for _, g := range stopped {
		group, kind := pr.kinds.groupKind(g)
		stale, _ := pr.store.Read().ResourcesOfKind(group, kind, "")
		for _, r := range stale {
			pr.handlers.forgetResource(ctx, r.UID)
		}
	}
}

// removePolicy forgets a policy: its results go, and the reports of the
// resources it had results for are rewritten.
func (pr *policyReconciler) removePolicy(ctx context.Context, name string) error {
	tracked := pr.policies.get(name) != nil
	affected, _ := pr.store.Read().ResultsOfPolicy(name)
	if !tracked && len(affected) == 0 {
		return nil
	}
	if err := pr.store.Write(func(w *memstore.WriteTxn) error { return w.DeletePolicy(name) }); err != nil {
		return fmt.Errorf("forgetting policy %s: %w", name, err)
	}
	pr.policies.remove(name)
	for _, r := range affected {
		pr.metrics.count([]memstore.Result{r.Result}, -1)
		pr.handlers.queue.Add(r.UID)
	}
	pr.ensureKinds(ctx, name, nil)
	return nil
}

// dropMissingPolicies forgets the policies of a kind that a complete list
// of it does not hold.
func (pr *policyReconciler) dropMissingPolicies(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) error {
	present := map[string]bool{}
	for _, u := range objs {
		present[catalog.Key(gvr, u.GetNamespace(), u.GetName())] = true
	}
	as := pr.admissionPolicies[gvr]
	var errs []error
	for _, name := range pr.policies.keysOf(gvr) {
		switch {
		case present[name]:
		case as != nil:
			errs = append(errs, pr.removeAdmissionPolicy(ctx, as, strings.TrimPrefix(name, as.kind.KeyPrefix)))
		default:
			errs = append(errs, pr.removePolicy(ctx, name))
		}
	}
	return errors.Join(errs...)
}

// refOf refers to an object, for Events.
func refOf(u *unstructured.Unstructured) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(),
		Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}
}

var _ controlApplier = (*policyReconciler)(nil)

// applyEvent applies one object's newest event (the control queue's).
func (pr *policyReconciler) applyEvent(ctx context.Context, ev *controlEvent) error {
	u := ev.obj
	if ev.gvr == apiresources.PolicyException || ev.gvr == apiresources.CELPolicyException {
		if ev.removed {
			return pr.exceptions.remove(exceptionKey(ev.gvr, u.GetNamespace(), u.GetName()))
		}
		return pr.exceptions.upsert(ctx, ev.gvr, u)
	}
	if as := pr.admissionPolicies[ev.gvr]; as != nil {
		switch {
		case ev.gvr == as.kind.Binding && ev.removed:
			return pr.recompile(ctx, as, as.setBinding(u.GetName(), nil))
		case ev.gvr == as.kind.Binding:
			return pr.recompile(ctx, as, as.setBinding(u.GetName(), u))
		case ev.removed:
			return pr.removeAdmissionPolicy(ctx, as, u.GetName())
		default:
			return pr.upsertAdmissionPolicy(ctx, as, u)
		}
	}
	if !ev.removed {
		return pr.upsertPolicy(ctx, ev.gvr, u)
	}
	pr.opts.Catalog.Forget(ev.gvr, u.GetNamespace(), u.GetName())
	name := catalog.Key(ev.gvr, u.GetNamespace(), u.GetName())
	if err := pr.removePolicy(ctx, name); err != nil {
		return err
	}
	// A deleted policy keeps no series (its results' go with them).
	pr.metrics.policyErrors.DeletePartialMatch(prometheus.Labels{labelPolicy: name})
	return nil
}

// applyList applies a complete list of a control kind (the control
// queue's): what is not in it is forgotten.
func (pr *policyReconciler) applyList(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) error {
	if as := pr.admissionPolicies[gvr]; as != nil && gvr == as.kind.Binding {
		return pr.recompile(ctx, as, as.dropMissingBindings(objs))
	}
	if gvr == apiresources.PolicyException || gvr == apiresources.CELPolicyException {
		return pr.exceptions.dropMissing(gvr, objs)
	}
	if catalog.IsPolicyKind(gvr) {
		pr.opts.Catalog.Retain(gvr, objs)
	}
	return pr.dropMissingPolicies(ctx, gvr, objs)
}

// listed marks a control kind listed, once its list is applied.
func (pr *policyReconciler) listed(gvr schema.GroupVersionResource) { pr.handlers.listedIn(gvr, "") }

// tellLeftOut records a Warning Event RulesNotEvaluated on a policy with
// rules tally leaves out, once per generation, from the replica keeping
// the policies' status (beside Kyverno, Kyverno evaluates them and tally
// says nothing).
func (pr *policyReconciler) tellLeftOut(obj runtime.Object, p *engine.Policy) {
	if p == nil || len(p.LeftOut) == 0 || pr.opts.Recorder == nil || pr.opts.NoPolicyStatus || obj == nil {
		return
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	key := m.GetNamespace() + "/" + m.GetName()
	if prev, ok := pr.leftOutTold.Load(key); ok && prev.(int64) == m.GetGeneration() {
		return
	}
	pr.leftOutTold.Store(key, m.GetGeneration())
	pr.opts.Recorder.Eventf(obj, corev1.EventTypeWarning, "RulesNotEvaluated", "%s %s %s", engine.DescribeLeftOut(p.LeftOut), verbOf(p.LeftOut), engine.NotEvaluatedNote)
}

// setPolicyStatus records whether the policy is evaluated, unless its status
// already says so for this generation. The patch is conditional on the
// resourceVersion seen: a newer version gets its own update. With admission
// on (and Options.WebhookConfigured set), Ready waits until the webhook
// configuration sends the policy's requests to tally; if it does not within
// webhookWait, Ready (or, for a CEL policy, WebhookConfigured) is False
// saying so.
func (pr *policyReconciler) setPolicyStatus(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, rejected error, loaded string, admission bool, more ...Condition) {
	parent := ctx
	// An admission policy's status is the API server's; tests that
	// drive the scanner without Run write none.
	kind, _ := catalog.KindOf(gvr)
	if pr.opts.NoPolicyStatus || !pr.running.Load() || kind == nil || kind.Family == catalog.AdmissionPolicy {
		return
	}
	await := rejected == nil && admission && pr.opts.WebhookConfigured != nil
	pr.statusWrites.Add(1) // Run waits for it
	go func() {
		defer pr.statusWrites.Done()
		if await {
			name, gen := kind.Key(u.GetNamespace(), u.GetName()), u.GetGeneration()
			configured := pr.awaitWebhook(parent, name, gen)
			if parent.Err() != nil {
				return
			}
			if !configured {
				const why = "the admission webhook's configuration does not send this policy's requests to tally yet"
				logr.FromContextOrDiscard(ctx).Info("policy not marked Ready: "+why, "policy", name, "waited", webhookWait)
				if kind.Family == catalog.CEL {
					more = webhookNotConfigured(more, why)
				} else {
					rejected = errors.New(why)
				}
			}
		}
		ctx, cancel := context.WithTimeout(parent, 30*time.Second)
		defer cancel()
		if err := WriteReady(ctx, pr.client, gvr, u, pr.opts.Clock.Now(), rejected, loaded, fieldManager, more...); err != nil && ctx.Err() == nil {
			logr.FromContextOrDiscard(ctx).Error(err, "recording the policy's Ready condition failed", "policy", u.GetNamespace()+"/"+u.GetName())
		}
	}()
}

// awaitWebhook asks Options.WebhookConfigured every 100 ms, on the
// scanner's clock, whether the webhook sends a policy's requests at a
// generation, until it does (true) or webhookWait passed or ctx ended
// (false).
func (pr *policyReconciler) awaitWebhook(ctx context.Context, name string, generation int64) bool {
	deadline := pr.opts.Clock.Now().Add(webhookWait)
	tick := pr.opts.Clock.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if pr.opts.WebhookConfigured(name, generation) {
			return true
		}
		if !pr.opts.Clock.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C():
		}
	}
}

// upsertAdmissionPolicy applies an admission policy's change: a reported
// one is scanned as any other policy; one that is not (or no longer) has
// no results.
func (pr *policyReconciler) upsertAdmissionPolicy(ctx context.Context, as *admissionPolicySet, u *unstructured.Unstructured) error {
	if !as.kind.Reported(u.GetLabels()) {
		return pr.removeAdmissionPolicy(ctx, as, u.GetName())
	}
	return pr.upsertPolicy(ctx, as.kind.GVR, u)
}

// removeAdmissionPolicy forgets an admission policy and its results.
func (pr *policyReconciler) removeAdmissionPolicy(ctx context.Context, as *admissionPolicySet, name string) error {
	as.forget(name)
	return pr.removePolicy(ctx, as.kind.Key("", name))
}

// recompile compiles scanned admission policies again (their bindings
// changed: admissionPolicySet.setBinding, dropMissingBindings).
func (pr *policyReconciler) recompile(ctx context.Context, as *admissionPolicySet, policies []*unstructured.Unstructured) error {
	var errs []error
	for _, p := range policies {
		errs = append(errs, pr.upsertPolicy(ctx, as.kind.GVR, p))
	}
	return errors.Join(errs...)
}
