package scan

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/memstore"
)

// scheduler runs each policy's periodic full scans: it knows when each
// policy was last scanned (the store, persisted by scanState) and when the
// next scan is due (the policy's schedule), and has the evaluator scan a
// policy when it is, once the handlers say everything was listed and
// applied (synced).
type scheduler struct {
	clock     clock.WithTicker
	store     *memstore.Store
	state     *scanState
	metrics   *metrics
	policies  *policySet
	handlers  *handlers
	evaluator *evaluator

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
			sc.handlers.queue.Protect(ctx, "scheduling", func() { sc.runDue(ctx) })
		}
	}
}

// runDue scans every policy whose next scan is due. A policy never
// scanned before is taken as scanned by the initial sync, back-dated by its
// jitter; missed cron runs become a single catch-up scan.
func (sc *scheduler) runDue(ctx context.Context) {
	if !sc.handlers.synced() {
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
	if err := sc.evaluator.scanPolicy(ctx, tp); err != nil {
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
