package scan

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// evaluator is the scan's evaluation step: the workers' reconcile of one
// resource, and a policy's periodic scan of every resource it can match.
// It reads a resource, its namespace and the exceptions from the store,
// evaluates the policies on it (evaluateResource: no writes, no Events),
// replaces the resource's results in the store, and hands what changed to
// the result sink (results.go), which the report hand-over, the metrics
// and the Events observe.
type evaluator struct {
	opts     *Options
	store    *memstore.Store
	queue    *watch.Queue
	kinds    *kindWatch
	policies *policySet
	// handlers hold the resources deferred until the policies are listed.
	handlers *handlers
	params   *paramCache
	metrics  *metrics
	sink     *resultSink
	locks    keyedMutex
}

// reconcile evaluates one resource against every scanned policy, replaces
// its results in the store and writes its report if the content changed. A
// resource no longer in the store has its report deleted.
func (e *evaluator) reconcile(ctx context.Context, uid string) error {
	return e.reconcileOnly(ctx, uid, nil)
}

// reconcileOnly is reconcile evaluating one policy only (only non-nil: a
// policy's scheduled scan): the stored results of the others are kept as
// they are, so that a policy's periodic scan costs that policy's
// evaluation, not every policy's.
func (e *evaluator) reconcileOnly(ctx context.Context, uid string, only *trackedPolicy) error {
	if !e.kinds.policiesListed() {
		// Policies, exceptions and namespaces arrive first (streamed): a
		// resource evaluated before would be written twice. It waits for
		// them, once (a timer per try would evaluate it again after each
		// policy's application already had).
		e.handlers.deferred.add(uid)
		if e.kinds.policiesListed() { // listed meanwhile: nobody else will release it
			e.handlers.releaseDeferred()
		}
		return nil
	}
	// Evaluated now: not again when the waiting ones are released (a
	// policy's application queued it too, and that came first).
	e.handlers.deferred.remove(uid)
	unlock := e.locks.lock(uid)
	defer unlock()

	r := e.store.Read()
	res, err := r.Resource(uid)
	if err != nil {
		return err
	}
	if res == nil {
		if !e.kinds.listedAll() {
			// Not listed yet (start-up, or a kind just added): the resource may
			// still arrive. Once everything is listed, sweepOrphans removes the
			// reports of resources that did not.
			return nil
		}
		// Gone (deleted while tally was down, for a seeded result): its
		// results and report go.
		var before []memstore.Result
		if err := e.store.Write(func(w *memstore.WriteTxn) error {
			var err error
			if before, err = w.Results(uid); err != nil || len(before) == 0 {
				return err
			}
			_, err = w.SetResults(uid, nil)
			return err
		}); err != nil {
			return fmt.Errorf("forget results of %s: %w", uid, err)
		}
		e.sink.gone(uid, before)
		return nil
	}
	start := e.opts.Clock.Now()
	policies := e.policies.active()
	if only != nil {
		policies = []*trackedPolicy{only}
	}
	gvr := e.kinds.gvrFor(res.Group, res.Kind)
	fresh, evaluated, err := e.evaluateResource(ctx, r, res, gvr, policies, start)
	if err != nil {
		return err
	}
	// The whole set is replaced: results of deleted or no longer matching
	// policies and rules vanish with it.
	var before, results []memstore.Result
	changed := false
	if err := e.store.Write(func(w *memstore.WriteTxn) error {
		var err error
		if before, err = w.Results(uid); err != nil {
			return err
		}
		if only != nil {
			source, name := only.compiled.Source, only.compiled.Name
			for _, b := range before {
				if e := b.Value(); e.Source != source || e.Policy != name {
					fresh = append(fresh, b)
				}
			}
		}
		if changed, err = w.SetResults(uid, fresh); err != nil {
			return err
		}
		results, err = w.Results(uid)
		return err
	}); err != nil {
		return fmt.Errorf("store results of %s: %w", uid, err)
	}
	if changed {
		e.sink.changed(res, before, results)
	}
	if evaluated {
		e.metrics.resources.Inc()
		e.metrics.scanDuration.Observe(e.opts.Clock.Since(start).Seconds())
	}
	return e.sink.publish(ctx, res, gvr, results)
}

// evaluateResource evaluates policies on a stored resource, read with its
// namespace's labels and the exceptions from r, at now: the results it
// would have, and whether some policy applied. It writes nothing. The
// evaluation has a deadline (Options.EvalTimeout): the rules it leaves are
// error results, stored as any other (the next periodic scan tries them
// again). The error is ctx's end (what a cut evaluation gave is not kept).
func (e *evaluator) evaluateResource(ctx context.Context, r *memstore.ReadTxn, res *memstore.Resource, gvr schema.GroupVersionResource,
	policies []*trackedPolicy, now time.Time) (fresh []memstore.Result, evaluated bool, err error) {
	obj, err := res.Object()
	if err != nil {
		return nil, false, err
	}
	req := &engine.Request{Object: obj, Background: true, Params: e.params, Loader: e.opts.Loader, Data: e.opts.Data, Images: e.opts.Images}
	if res.Namespace != "" {
		if ns, _ := r.Namespace(res.Namespace); ns != nil {
			req.NamespaceLabels = ns.Labels
		}
	} else if res.Kind == "Namespace" {
		if ns, _ := r.Namespace(res.Name); ns != nil {
			req.NamespaceLabels = ns.Labels
		}
	}
	if exs, _ := r.Exceptions(); len(exs) > 0 {
		for _, e := range exs {
			switch x := e.Compiled.(type) {
			case *engine.Exception:
				req.Exceptions = append(req.Exceptions, x)
			case *engine.CELException:
				req.CELExceptions = append(req.CELExceptions, x)
			}
		}
	}
	evalCtx, cancel := context.WithTimeout(ctx, e.opts.EvalTimeout)
	defer cancel()
	req.Resource = gvr // CEL policies match resources by their plural, which discovery knows
	// The platform's policies first, within the resource's deadline; then
	// each namespaced policy (a tenant's) within a deadline of its own:
	// a tenant's slow policy turns no other policy's result into an error.
	tenants := false
	for pass := range 2 {
		for _, tp := range policies {
			if (tp.compiled.Namespace != "") != (pass == 1) {
				tenants = tenants || pass == 0
				continue
			}
			if !tp.mayMatch(res, gvr) || !tp.applies(obj, req.NamespaceLabels, gvr) {
				continue
			}
			evaluated = true
			if pass == 0 {
				fresh = e.evaluatePolicy(evalCtx, tp, req, now, fresh)
				continue
			}
			own, cancel := context.WithTimeout(ctx, e.opts.EvalTimeout)
			fresh = e.evaluatePolicy(own, tp, req, now, fresh)
			cancel()
		}
		if !tenants {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err // stopping
	}
	if evalCtx.Err() != nil {
		e.metrics.evalDeadlines.Inc()
		logr.FromContextOrDiscard(ctx).Info("evaluation exceeded its deadline; the rules left are errors", "uid", res.UID, "deadline", e.opts.EvalTimeout)
	}
	return fresh, evaluated, nil
}

// evaluatePolicy evaluates one policy on a request and appends its results
// (one per policy and rule) to fresh.
func (e *evaluator) evaluatePolicy(ctx context.Context, tp *trackedPolicy, req *engine.Request, now time.Time, fresh []memstore.Result) []memstore.Result {
	seen := map[string]bool{}
	for _, rr := range e.evaluate(ctx, tp.compiled, req) {
		if rr.ConditionsNotMet {
			continue // a CEL policy whose matchConditions do not hold has no entry, as in Kyverno's reports
		}
		if seen[rr.Rule] {
			continue // one entry per (policy, rule)
		}
		seen[rr.Rule] = true
		fresh = append(fresh, storedResult(slim(report.Result(tp.compiled, rr, report.ProcessBackground, now))))
	}
	return fresh
}

// seedResults loads the results of reports written before a restart, so that
// unchanged results keep their timestamps and unchanged reports are not
// written again.
func (e *evaluator) seedResults(seeded map[string][]wgv1alpha2.PolicyReportResult) error {
	return e.store.Write(func(w *memstore.WriteTxn) error {
		for uid, entries := range seeded {
			before, err := w.Results(uid) // seeded already, by a seed tried again
			if err != nil {
				return err
			}
			e.metrics.count(before, -1)
			results := make([]memstore.Result, 0, len(entries))
			seen := make(map[wgv1alpha2.ResultKey]bool, len(entries))
			for _, entry := range entries {
				r := storedResult(slim(entry))
				if k := r.Value().Key(); !seen[k] { // a hand-edited duplicate: the first wins
					seen[k] = true
					results = append(results, r)
				}
			}
			if _, err := w.SetResults(uid, results); err != nil {
				return fmt.Errorf("seed results of %s: %w", uid, err)
			}
			e.metrics.count(results, +1)
		}
		return nil
	})
}

// scanPolicy re-evaluates one policy on every stored resource it can match
// (the results of the other policies are kept).
func (e *evaluator) scanPolicy(ctx context.Context, tp *trackedPolicy) error {
	return e.reconcileAll(ctx, e.resourcesOf(tp), tp)
}

func (e *evaluator) resourcesOf(tp *trackedPolicy) []string {
	var uids []string
	e.handlers.eachStored(e.store.Read(), tp.kinds(), tp.compiled.Namespace, func(_ schema.GroupVersionResource, res *memstore.Resource) {
		uids = append(uids, res.UID)
	})
	return uids
}

// reconcileAll reconciles resources with the scanner's worker count (only
// non-nil: evaluating that policy alone).
func (e *evaluator) reconcileAll(ctx context.Context, uids []string, only *trackedPolicy) error {
	reconcile := func(ctx context.Context, uid string) error { return e.reconcileOnly(ctx, uid, only) }
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range e.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for uid := range work {
				// A panic is recovered, counted and retried later by the queue.
				if err, panicked := e.queue.Guard(ctx, "periodic scan", uid, reconcile); err != nil && !panicked {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					e.queue.AddRateLimited(uid)
				}
			}
		}()
	}
	for _, uid := range uids {
		select {
		case work <- uid:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return firstErr
}

// evaluate runs one policy on a request. A panic in the engine is
// recovered: the policy's rules are then run one at a time, so that the
// rule at fault gets an error result naming it (R25: the other rules keep
// theirs), and the worker goes on with the next policy and resource.
func (e *evaluator) evaluate(ctx context.Context, p *engine.Policy, req *engine.Request) []engine.RuleResult {
	rr, err := evaluateSafely(ctx, p, req)
	if err == nil {
		return rr
	}
	if p.CEL() {
		// A CEL policy is evaluated whole: its one entry is the error.
		e.metrics.evalPanics.Inc()
		logr.FromContextOrDiscard(ctx).Error(err, "evaluation panicked; the policy gets an error result", "policy", p.Name)
		rule := ""
		if units := p.Units(); len(units) == 1 {
			rule = units[0].Name
		}
		return []engine.RuleResult{{Policy: p.Name, Rule: rule, Result: engine.Error, Message: panicMessage, Source: p.Source}}
	}
	var out []engine.RuleResult
	for _, rule := range p.Rules {
		one := *p
		one.Rules = []*engine.Rule{rule}
		rr, err := evaluateSafely(ctx, &one, req)
		if err == nil {
			out = append(out, rr...)
			continue
		}
		if rule.Err == nil && !rule.Applies(req.Object, req.NamespaceLabels) {
			continue // a rule that does not select the resource has no entry, panic or not
		}
		e.metrics.evalPanics.Inc()
		logr.FromContextOrDiscard(ctx).Error(err, "evaluation panicked; the rule gets an error result", "policy", p.Name, "rule", rule.Name)
		out = append(out, engine.RuleResult{Policy: p.Name, Rule: rule.Name, Result: engine.Error, Message: panicMessage})
	}
	return out
}

// keyedMutex serialises work on one key (a resource UID) between the queue
// workers and the scheduler, with a fixed set of stripes.
type keyedMutex struct{ stripes [64]sync.Mutex }

func (k *keyedMutex) lock(key string) func() {
	var h uint32 = 2166136261
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	m := &k.stripes[h%uint32(len(k.stripes))]
	m.Lock()
	return m.Unlock
}
