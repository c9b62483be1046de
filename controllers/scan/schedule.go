package scan

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/robfig/cron/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/memstore"
)

// Annotations that give a policy its own background scan schedule.
const (
	AnnotationInterval = "scan.tally.dev/interval"
	AnnotationSchedule = "scan.tally.dev/schedule"
)

// schedule says when a policy's next full scan is due after the last one.
type schedule struct {
	interval time.Duration
	cron     cron.Schedule
}

func (s schedule) next(last time.Time) time.Time {
	if s.cron != nil {
		return s.cron.Next(last)
	}
	return last.Add(s.interval)
}

// period is the nominal time between scans, for spreading first scans.
func (s schedule) period(now time.Time) time.Duration {
	if s.cron != nil {
		n := s.cron.Next(now)
		return s.cron.Next(n).Sub(n)
	}
	return s.interval
}

// scheduleOf reads a policy's schedule annotations (at most one of them).
func scheduleOf(annotations map[string]string, global time.Duration) (schedule, error) {
	iv, hasInterval := annotations[AnnotationInterval]
	cr, hasCron := annotations[AnnotationSchedule]
	switch {
	case hasInterval && hasCron:
		return schedule{}, fmt.Errorf("a policy may have %s or %s, not both", AnnotationInterval, AnnotationSchedule)
	case hasInterval:
		d, err := time.ParseDuration(iv)
		if err != nil || d <= 0 {
			return schedule{}, fmt.Errorf("%s: %q is not a positive duration", AnnotationInterval, iv)
		}
		return schedule{interval: d}, nil
	case hasCron:
		c, err := cron.ParseStandard(cr)
		if err != nil {
			return schedule{}, fmt.Errorf("%s: %q is not a five-field cron schedule: %w", AnnotationSchedule, cr, err)
		}
		return schedule{cron: c}, nil
	}
	return schedule{interval: global}, nil
}

// jitter spreads the first scans of policies over their period, by a stable
// hash of the name, so that a fleet of policies never rescans all at once.
func jitter(name string, period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name)) // a hash.Hash's Write never returns an error
	return time.Duration(h.Sum64() % uint64(period))
}

// scheduler runs each policy's periodic full scans: it knows when each
// policy was last scanned (the store, persisted by scanState) and when the
// next scan is due (the policy's schedule), and asks for scans through
// scanPolicy.
type scheduler struct {
	clock    clock.WithTicker
	store    *memstore.Store
	state    *scanState
	metrics  *metrics
	policies *policySet
	// ready reports whether scans may run (everything listed, queue idle).
	ready func() bool
	// scan re-evaluates every resource a policy can match.
	scan func(ctx context.Context, tp *trackedPolicy) error
	// protect runs fn, recovering a panic (the queue's guard).
	protect func(ctx context.Context, what string, fn func())

	// evaluated is when this process last evaluated each policy on every
	// resource it can match: a scan, or the evaluations done by the time
	// the scheduler first saw the policy ready (the first sync, or the
	// policy's arrival). The since-last-scan gauge reads the later of it and
	// the stored time, which for a policy never scanned before is back-dated
	// by its jitter: a base for the schedule, not a scan.
	mu        sync.Mutex
	evaluated map[string]time.Time
}

// markEvaluated records that a policy was evaluated on everything at at
// (first: only if nothing is recorded yet); it returns the time recorded.
func (sc *scheduler) markEvaluated(policy string, at time.Time, first bool) time.Time {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.evaluated == nil {
		sc.evaluated = map[string]time.Time{}
	}
	prev, ok := sc.evaluated[policy]
	if (first && ok) || prev.After(at) {
		return prev
	}
	sc.evaluated[policy] = at
	return at
}

// run runs the periodic scans until ctx ends.
func (sc *scheduler) run(ctx context.Context) {
	ticker := sc.clock.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			sc.protect(ctx, "scheduling", func() { sc.runDue(ctx) })
		}
	}
}

// runDue scans every policy whose next scan is due. A policy never
// scanned before is taken as scanned by the initial sync, back-dated by its
// jitter; missed cron runs become a single catch-up scan.
func (sc *scheduler) runDue(ctx context.Context) {
	if !sc.ready() {
		return
	}
	now := sc.clock.Now()
	active := sc.policies.active()
	// The series of policies no longer scanned (deleted, background off)
	// go. Only this goroutine touches sinceSeries.
	scanned := make(map[string]bool, len(active))
	for _, tp := range active {
		scanned[tp.name] = true
	}
	for name := range sc.metrics.sinceSeries {
		if !scanned[name] {
			sc.metrics.sinceLastScan.DeleteLabelValues(name)
			delete(sc.metrics.sinceSeries, name)
		}
	}
	sc.mu.Lock()
	for name := range sc.evaluated {
		if !scanned[name] {
			delete(sc.evaluated, name)
		}
	}
	sc.mu.Unlock()
	for _, tp := range active {
		last, err := sc.store.Read().LastScan(tp.name)
		if err != nil {
			continue
		}
		evaluated := sc.markEvaluated(tp.name, now, true)
		if last.IsZero() {
			start := now.Add(-jitter(tp.name, tp.schedule.period(now)))
			sc.complete(ctx, tp.name, start)
			continue
		}
		since := now.Sub(last)
		if evaluated.After(last) {
			since = now.Sub(evaluated)
		}
		sc.metrics.sinceLastScan.WithLabelValues(tp.name).Set(since.Seconds())
		sc.metrics.sinceSeries[tp.name] = true
		if tp.schedule.next(last).After(now) {
			continue
		}
		if err := sc.scanNow(ctx, tp); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "periodic scan failed", "policy", tp.name)
		}
	}
}

// scanNow scans one policy and records the scan as complete.
func (sc *scheduler) scanNow(ctx context.Context, tp *trackedPolicy) error {
	start := sc.clock.Now()
	if err := sc.scan(ctx, tp); err != nil {
		return err
	}
	sc.complete(ctx, tp.name, start)
	return nil
}

// complete records a policy's last complete scan, in the store and in the
// persisted scan state.
func (sc *scheduler) complete(ctx context.Context, policy string, at time.Time) {
	sc.markEvaluated(policy, at, false)
	if err := sc.store.Write(func(w *memstore.WriteTxn) error { return w.SetLastScan(policy, at) }); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "recording the scan time failed", "policy", policy)
	}
	// A scan that ended later may have recorded a later time: that one stays.
	if last, err := sc.store.Read().LastScan(policy); err == nil && last.After(at) {
		at = last
	}
	if err := sc.state.save(ctx, policy, at); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "persisting the scan time failed", "policy", policy)
	}
}

// ScanPolicy re-evaluates every resource a policy can match, now. Nothing is
// written for resources whose results did not change.
func (s *Scanner) ScanPolicy(ctx context.Context, name string) error {
	tp := s.policies.get(name)
	if tp == nil {
		return fmt.Errorf("policy %s is not scanned", name)
	}
	return s.sched.scanNow(ctx, tp)
}

// RescanAll re-evaluates every stored resource (a forced full rescan); it
// completes the scan of every policy.
func (s *Scanner) RescanAll(ctx context.Context) error {
	start := s.opts.Clock.Now()
	all, err := s.store.Read().Resources()
	if err != nil {
		return err
	}
	uids := make([]string, len(all))
	for i, r := range all {
		uids[i] = r.UID
	}
	if err := s.reconcileAll(ctx, uids, nil); err != nil {
		return err
	}
	for _, tp := range s.policies.active() {
		s.sched.complete(ctx, tp.name, start)
	}
	return nil
}

// scanPolicy re-evaluates one policy on every stored resource it can match
// (the results of the other policies are kept).
func (s *Scanner) scanPolicy(ctx context.Context, tp *trackedPolicy) error {
	return s.reconcileAll(ctx, s.resourcesOf(tp), tp)
}

func (s *Scanner) resourcesOf(tp *trackedPolicy) []string {
	r := s.store.Read()
	var uids []string
	for _, gvr := range tp.kinds() {
		group, kind := s.kinds.groupKind(gvr)
		if kind == "" {
			continue
		}
		resources, _ := r.ResourcesOfKind(group, kind, tp.compiled.Namespace)
		for _, res := range resources {
			uids = append(uids, res.UID)
		}
	}
	return uids
}

// reconcileAll reconciles resources with the scanner's worker count (only
// non-nil: evaluating that policy alone).
func (s *Scanner) reconcileAll(ctx context.Context, uids []string, only *trackedPolicy) error {
	reconcile := func(ctx context.Context, uid string) error { return s.reconcileOnly(ctx, uid, only) }
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range s.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for uid := range work {
				// A panic is recovered, counted and retried later by the queue.
				if err, panicked := s.queue.Guard(ctx, "periodic scan", uid, reconcile); err != nil && !panicked {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					s.queue.AddRateLimited(uid)
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

// scanState persists each policy's last complete scan in a ConfigMap, so
// that a restart or failover neither rescans everything nor skips a window.
type scanState struct {
	client          dynamic.Interface
	namespace, name string
	// readOnly loads but never saves (Options.StateReadOnly).
	readOnly bool
}

func newScanState(client dynamic.Interface, namespace, name string) *scanState {
	return &scanState{client: client, namespace: namespace, name: name}
}

// stateKey encodes a policy name as a ConfigMap key ("ns/name" -> "ns_name":
// Kubernetes names never contain "_").
func stateKey(policy string) string { return strings.ReplaceAll(policy, "/", "_") }

func (st *scanState) load(ctx context.Context, store *memstore.Store) error {
	if st.namespace == "" {
		return nil
	}
	cm, err := st.client.Resource(apiresources.ConfigMap).Namespace(st.namespace).Get(ctx, st.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get scan state %s/%s: %w", st.namespace, st.name, err)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	return store.Write(func(w *memstore.WriteTxn) error {
		for k, v := range data {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				continue // an unreadable entry means "never scanned"
			}
			if err := w.SetLastScan(strings.ReplaceAll(k, "_", "/"), t); err != nil {
				return err
			}
		}
		return nil
	})
}

func (st *scanState) save(ctx context.Context, policy string, at time.Time) error {
	if st.namespace == "" || st.readOnly {
		return nil
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": st.name, "namespace": st.namespace},
		"data":     map[string]any{stateKey(policy): at.UTC().Format(time.RFC3339Nano)},
	}}
	_, err := st.client.Resource(apiresources.ConfigMap).Namespace(st.namespace).Apply(ctx, st.name, cm, metav1.ApplyOptions{FieldManager: fieldManager + "-" + stateKey(policy), Force: true})
	return err
}
