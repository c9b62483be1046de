package scan

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// reconcile evaluates one resource against every scanned policy, replaces
// its results in the store and writes its report if the content changed. A
// resource no longer in the store has its report deleted.
func (s *Scanner) reconcile(ctx context.Context, uid string) error {
	return s.reconcileOnly(ctx, uid, nil)
}

// reconcileOnly is reconcile evaluating one policy only (only non-nil: a
// policy's scheduled scan): the stored results of the others are kept as
// they are, so that a policy's periodic scan costs that policy's
// evaluation, not every policy's.
func (s *Scanner) reconcileOnly(ctx context.Context, uid string, only *trackedPolicy) error {
	if !s.kinds.policiesListed() {
		// Policies, exceptions and namespaces arrive first (streamed): a
		// resource evaluated before would be written twice. It waits for
		// them, once (a timer per try would evaluate it again after each
		// policy's application already had).
		s.deferred.add(uid)
		if s.kinds.policiesListed() { // listed meanwhile: nobody else will release it
			s.releaseDeferred()
		}
		return nil
	}
	// Evaluated now: not again when the waiting ones are released (a
	// policy's application queued it too, and that came first).
	s.deferred.remove(uid)
	unlock := s.locks.lock(uid)
	defer unlock()

	r := s.store.Read()
	res, err := r.Resource(uid)
	if err != nil {
		return err
	}
	if res == nil {
		if !s.kinds.listedAll() {
			// Not listed yet (start-up, or a kind just added): the resource may
			// still arrive. Once everything is listed, sweepOrphans removes the
			// reports of resources that did not.
			return nil
		}
		// Gone (deleted while tally was down, for a seeded result): its
		// results and report go.
		var before []memstore.Result
		if err := s.store.Write(func(w *memstore.WriteTxn) error {
			var err error
			if before, err = w.Results(uid); err != nil || len(before) == 0 {
				return err
			}
			_, err = w.SetResults(uid, nil)
			return err
		}); err != nil {
			return fmt.Errorf("forget results of %s: %w", uid, err)
		}
		s.countResults(before, -1)
		s.reports.remove(uid)
		return nil
	}
	start := s.opts.Clock.Now()
	obj, err := res.Object()
	if err != nil {
		return err
	}
	policies := s.policies.active()
	if only != nil {
		policies = []*trackedPolicy{only}
	}
	req := &engine.Request{Object: obj, Background: true, Params: s.params, Loader: s.opts.Loader, Data: s.opts.Data}
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

	now := start
	gvr := s.kinds.gvrFor(res.Group, res.Kind)
	var fresh []memstore.Result
	evaluated := false
	// The evaluation has a deadline: the rules it leaves are error results,
	// stored as any other (the next periodic scan tries them again).
	evalCtx, cancel := context.WithTimeout(ctx, s.opts.EvalTimeout)
	defer cancel()
	req.Resource = gvr // CEL policies match resources by their plural, which discovery knows
	for _, tp := range policies {
		if !tp.mayMatch(res, gvr) || !tp.applies(obj, req.NamespaceLabels, gvr) {
			continue
		}
		evaluated = true
		seen := map[string]bool{}
		for _, rr := range s.evaluate(evalCtx, tp.compiled, req) {
			if rr.ConditionsNotMet {
				continue // a CEL policy whose matchConditions do not hold has no entry, as in Kyverno's reports
			}
			if seen[rr.Rule] {
				continue // one entry per (policy, rule)
			}
			seen[rr.Rule] = true
			fresh = append(fresh, storedResult(slim(report.Result(tp.compiled, rr, report.ProcessBackground, now))))
		}
	}
	if err := ctx.Err(); err != nil {
		return err // stopping: what a cut evaluation gave is not stored
	}
	if evalCtx.Err() != nil {
		s.metrics.evalDeadlines.Inc()
		logr.FromContextOrDiscard(ctx).Info("evaluation exceeded its deadline; the rules left are errors", "uid", uid, "deadline", s.opts.EvalTimeout)
	}
	// The whole set is replaced: results of deleted or no longer matching
	// policies and rules vanish with it.
	var before, results []memstore.Result
	changed := false
	if err := s.store.Write(func(w *memstore.WriteTxn) error {
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
		s.countResults(before, -1)
		s.countResults(results, +1)
		s.emitResultEvents(res, before, results)
	}
	if evaluated {
		s.metrics.resources.Inc()
		s.metrics.scanDuration.Observe(time.Since(start).Seconds())
	}
	return s.reports.ensure(ctx, res, gvr, results)
}

// mayMatch is a cheap pre-filter: the policy has a rule for the resource's
// kind (and, for a Policy, namespace). The engine decides the rest.
func (tp *trackedPolicy) mayMatch(res *memstore.Resource, gvr schema.GroupVersionResource) bool {
	if tp.compiled.Namespace != "" && tp.compiled.Namespace != res.Namespace {
		return false
	}
	for _, gvrs := range tp.ruleKinds {
		for _, g := range gvrs {
			if g == gvr {
				return true
			}
		}
	}
	return false
}

// applies reports whether some rule of the policy selects the resource
// (compiled matchers: cheap), so that resources no rule can match cost no
// evaluation.
func (tp *trackedPolicy) applies(obj map[string]any, nsLabels map[string]string, gvr schema.GroupVersionResource) bool {
	for _, u := range tp.units {
		if u.Err != nil || u.Applies(obj, nsLabels, gvr) {
			return true // a broken rule reports its error where its kinds match
		}
	}
	return false
}

// seedResults loads the results of reports written before a restart, so that
// unchanged results keep their timestamps and unchanged reports are not
// written again.
func (s *Scanner) seedResults(seeded map[string][]wgv1alpha2.PolicyReportResult) error {
	return s.store.Write(func(w *memstore.WriteTxn) error {
		for uid, entries := range seeded {
			before, err := w.Results(uid) // seeded already, by a seed tried again
			if err != nil {
				return err
			}
			s.countResults(before, -1)
			results := make([]memstore.Result, 0, len(entries))
			seen := make(map[wgv1alpha2.ResultKey]bool, len(entries))
			for _, e := range entries {
				r := storedResult(slim(e))
				if k := r.Value().Key(); !seen[k] { // a hand-edited duplicate: the first wins
					seen[k] = true
					results = append(results, r)
				}
			}
			if _, err := w.SetResults(uid, results); err != nil {
				return fmt.Errorf("seed results of %s: %w", uid, err)
			}
			s.countResults(results, +1)
		}
		return nil
	})
}

// countResults moves the results gauge (R31) by delta for each result. A
// series whose count falls to zero is deleted: a deleted policy or rule, or
// a result value no resource has any more, leaves no series behind.
func (s *Scanner) countResults(results []memstore.Result, delta int) {
	m := s.metrics
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	for _, r := range results {
		e := r.Value()
		k := [3]string{e.Policy, e.Rule, string(e.Result)}
		n := m.series[k] + delta
		if n <= 0 {
			delete(m.series, k)
			m.results.DeleteLabelValues(k[0], k[1], k[2])
			continue
		}
		m.series[k] = n
		m.results.WithLabelValues(k[0], k[1], k[2]).Set(float64(n))
	}
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
func (s *Scanner) releaseDeferred() {
	for uid := range s.deferred.take() {
		s.queue.Add(uid)
	}
}
