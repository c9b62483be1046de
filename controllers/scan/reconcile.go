package scan

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	unlock := s.locks.lock(uid)
	defer unlock()

	r := s.store.Read()
	res, err := r.Resource(uid)
	if err != nil {
		return err
	}
	if res == nil {
		if !s.listedAll() {
			// Not listed yet (start-up, or a kind just added): the resource may
			// still arrive. Once everything is listed, sweepOrphans removes the
			// reports of resources that did not.
			return nil
		}
		return s.reports.remove(ctx, uid)
	}
	start := s.opts.Clock.Now()
	policies := s.activePolicies()
	req := &engine.Request{Object: res.Object, Background: true}
	if res.Namespace != "" {
		if ns, _ := r.Namespace(res.Namespace); ns != nil {
			req.NamespaceLabels = ns.Labels
		}
	} else if res.Kind == "Namespace" {
		req.NamespaceLabels = res.Labels
	}
	if exs, _ := r.Exceptions(); len(exs) > 0 {
		for _, e := range exs {
			req.Exceptions = append(req.Exceptions, e.Compiled.(*engine.Exception))
		}
	}

	now := start
	gvr := s.gvrFor(res.Group, res.Kind)
	var fresh []*memstore.Result
	evaluated := false
	for _, tp := range policies {
		if !tp.mayMatch(res, gvr) || !tp.applies(res.Object, req.NamespaceLabels) {
			continue
		}
		evaluated = true
		for _, rr := range tp.compiled.Evaluate(ctx, req) {
			rr.Message = s.messages.intern(rr.Message)
			entry := report.Result(tp.compiled, rr, report.ProcessBackground, now)
			fresh = append(fresh, &memstore.Result{
				ResourceUID: uid, Policy: tp.name, Rule: rr.Rule, Result: string(rr.Result), Message: rr.Message,
				Digest: resultDigest(entry), Changed: now, Payload: entry,
			})
		}
	}
	// The whole set is replaced: results of deleted or no longer matching
	// policies and rules vanish with it.
	var before []*memstore.Result
	changed := false
	if err := s.store.Write(func(w *memstore.WriteTxn) error {
		var err error
		if before, err = w.Results(uid); err != nil {
			return err
		}
		changed, err = w.SetResults(uid, fresh)
		return err
	}); err != nil {
		return fmt.Errorf("store results of %s: %w", uid, err)
	}
	if changed {
		s.countResults(before, -1)
		s.countResults(fresh, +1)
	}
	results, err := s.store.Read().Results(uid)
	if err != nil {
		return err
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
func (tp *trackedPolicy) applies(obj map[string]any, nsLabels map[string]string) bool {
	for _, r := range tp.compiled.Rules {
		if r.Err != nil || r.Applies(obj, nsLabels) {
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
			byPolicy := map[string][]*memstore.Result{}
			for _, e := range entries {
				byPolicy[e.Policy] = append(byPolicy[e.Policy], &memstore.Result{
					ResourceUID: uid, Policy: e.Policy, Rule: e.Rule, Result: string(e.Result), Message: e.Message,
					Digest: resultDigest(e), Changed: time.Unix(e.Timestamp.Seconds, int64(e.Timestamp.Nanos)), Payload: e,
				})
			}
			for p, rs := range byPolicy {
				if _, err := w.ReplaceResults(uid, p, rs); err != nil {
					return fmt.Errorf("seed results of %s: %w", uid, err)
				}
				s.countResults(rs, +1)
			}
		}
		return nil
	})
}

// interner shares equal strings: result messages repeat across thousands of
// resources ("validation rule 'x' passed.", the same failure path), and one
// copy each is enough. It is bounded: past its size, strings are kept as
// they are.
type interner struct {
	mu sync.Mutex
	m  map[string]string
}

const maxInterned = 1 << 16

func (in *interner) intern(s string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if in.m == nil {
		in.m = map[string]string{}
	}
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}

// countResults moves the results gauge (R31) by delta for each result.
func (s *Scanner) countResults(results []*memstore.Result, delta float64) {
	for _, r := range results {
		s.metrics.results.WithLabelValues(r.Policy, r.Rule, r.Result).Add(delta)
	}
}
