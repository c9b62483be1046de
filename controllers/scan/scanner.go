package scan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/memstore"
)

// SetWebhookConfigured sets Options.WebhookConfigured, for a bridge made
// after the scanner; call it before Run.
func (s *Scanner) SetWebhookConfigured(f func(policy string, generation int64) bool) {
	s.opts.WebhookConfigured = f
}

// Scanner keeps the store in step with the cluster and writes the
// BackgroundScanReports. It is safe for one Run at a time.
//
// It is built in layers, each holding only the ones below it (doc.go):
//   - handlers, the watches' sink: they store resources and namespaces and
//     enqueue them for evaluation, and queue the control events (sink.go);
//   - the policy reconciler, the control queue's one worker: it applies the
//     changes of policies, exceptions and admission policies, and enqueues
//     the resources they concern (policies.go, control.go);
//   - the evaluator, the evaluation queue's workers: it evaluates a
//     resource and stores its results, handing what changed to the result
//     sink, which the metrics, the Events and the report hand-over observe
//     (reconcile.go, results.go);
//   - the scheduler, which has the evaluator scan each policy when due
//     (schedule.go).
//
// The Scanner builds them, runs their goroutines until its context ends,
// and answers for them (Synced, the rescans, DataForbidden).
type Scanner struct {
	opts   *Options
	client dynamic.Interface
	// handlers hold the store, the queues (the UIDs of resources to
	// evaluate; the control events to apply), the watches, the policy set
	// and the metrics, which the layers above share.
	handlers   *handlers
	reconciler *policyReconciler
	evaluator  *evaluator
	sched      *scheduler
}

// New builds a Scanner; it starts nothing (Run does).
func New(client dynamic.Interface, disc discovery.DiscoveryInterface, store *memstore.Store, opts Options) *Scanner {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Hour
	}
	if opts.EvalTimeout <= 0 {
		opts.EvalTimeout = DefaultEvalTimeout
	}
	if opts.ReadEvents == nil {
		opts.ReadEvents = opts.Recorder
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Handover == nil {
		opts.Handover = handover.New(handover.Options{})
	}
	o := &opts
	// Resources are evaluated namespace by namespace in turn: one
	// namespace's slow evaluations (a tenant's policy reading slowly)
	// delay another's by one evaluation at most.
	queue := watch.NewFairQueue("tally-scan", func(uid string) string {
		if res, err := store.Read().Resource(uid); err == nil && res != nil {
			return res.Namespace
		}
		return ""
	})
	control := newControlQueue()
	policies := newPolicySet()
	// The watches deliver to the handlers, which store and enqueue (and
	// ask the watches which kind a resource is): made first, with the
	// watches given to them below.
	h := &handlers{store: store, queue: queue, control: control, policies: policies, shard: opts.Shard}
	kinds := newKindWatch(client, disc, h, opts.Shard)
	m := newMetrics(opts.Registry, func() float64 { return float64(queue.Len()) }, func() float64 {
		n, _ := store.Read().CountResources()
		return float64(n)
	}, func() float64 { return float64(queue.Panics() + control.queue.Panics() + watch.SinkPanics()) })
	if opts.Shard != nil {
		opts.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_shard_namespaces_owned",
			Help: "Namespaces of this replica's shard that exist (their resources are watched here; tally_scan_stored_resources counts them)."},
			func() float64 { return float64(kinds.ownedNamespaces()) }))
	}
	reports := newReportWriter(client, opts.Handover, m, opts.FinalReports, opts.Shard)
	h.kinds, h.metrics, h.reports = kinds, m, reports
	pr := &policyReconciler{opts: o, client: client, store: store, policies: policies, kinds: kinds, handlers: h, metrics: m,
		exceptions:        &exceptionSet{store: store, handlers: h, scope: opts.Exceptions, metrics: m, recorder: opts.Recorder},
		admissionPolicies: map[schema.GroupVersionResource]*admissionPolicySet{}}
	for _, k := range catalog.Kinds(catalog.AdmissionPolicy) {
		as := newAdmissionPolicySet(k)
		pr.admissionPolicies[k.GVR], pr.admissionPolicies[k.Binding] = as, as
	}
	ev := &evaluator{opts: o, store: store, queue: queue, kinds: kinds, policies: policies, handlers: h,
		params: newParamCache(client, kinds, opts.Clock), metrics: m,
		sink: &resultSink{metrics: m, events: opts.Events, policies: policies, reports: reports}}
	state := newScanState(client, opts.StateNamespace, opts.StateName)
	state.readOnly = opts.StateReadOnly
	return &Scanner{opts: o, client: client, handlers: h, reconciler: pr, evaluator: ev,
		sched: &scheduler{clock: opts.Clock, store: store, state: state, metrics: m, policies: policies, handlers: h, evaluator: ev}}
}

// Run starts watching, evaluating and scheduling, and blocks until ctx ends.
func (s *Scanner) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("scan")
	ctx = logr.NewContext(ctx, log)
	defer s.handlers.queue.ShutDown()
	defer s.handlers.control.queue.ShutDown()
	s.reconciler.running.Store(true)
	defer s.reconciler.running.Store(false)
	// Existing reports and the scan state are read before anything else;
	// an unreachable API server is waited for (with backoff), not fatal.
	var seeded int
	if err := retry(ctx, s.opts.Clock, "reading existing reports", func() (err error) {
		seeded, err = s.evaluator.sink.reports.seed(ctx, s.evaluator.seedResults)
		return err
	}); err != nil {
		return nil // ctx ended
	}
	if err := retry(ctx, s.opts.Clock, "reading the scan state", func() error {
		err := s.sched.state.load(ctx, s.handlers.store)
		if apierrors.IsForbidden(err) {
			log.Error(err, "the scan state cannot be read; policies are scanned as if never scanned")
			return nil
		}
		return err
	}); err != nil {
		return nil
	}
	log.Info("seeded from the final reports", "reports", seeded)

	// The CEL kinds are watched where served (tally's CRDs, or Kyverno's
	// beside it; an older Kyverno has none, and classic policies go on); a
	// kind served later (its CRD established after the start) is watched
	// from then on.
	celKinds := celPolicyKinds(s.opts.MutatingAdmissionPolicyReports)
	served := watch.ServedNow(ctx, s.handlers.kinds.disc, s.opts.Clock, celKinds...)
	notServed := slices.DeleteFunc(slices.Clone(celKinds), func(g schema.GroupVersionResource) bool { return slices.Contains(served, g) })
	if len(notServed) > 0 {
		log.Info("policy kinds not served yet: watched once they are", "kinds", fmt.Sprint(notServed))
	}
	if s.opts.MutatingAdmissionPolicyReports && slices.ContainsFunc(notServed, func(g schema.GroupVersionResource) bool {
		k, ok := catalog.KindOf(g)
		return ok && k.ReportsFlag != ""
	}) {
		log.Error(errors.New("MutatingAdmissionPolicies are not served by the API server"),
			"MutatingAdmissionPolicies not reported (--mutating-admission-policy-reports) until they are: turn on the API server's MutatingAdmissionPolicy feature and admissionregistration.k8s.io/v1beta1")
	}
	s.handlers.kinds.start(ctx, append(slices.Clone(classicPolicySources), served...))
	// Kinds Kyverno evaluates and tally does not: told, not scanned (R46).
	stopUnevaluated := s.watchUnevaluated(ctx)
	defer stopUnevaluated()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watch.FollowServed(ctx, s.handlers.kinds.disc, s.opts.Clock, notServed, s.handlers.kinds.addPolicySource)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.handlers.control.run(ctx, s.reconciler)
	}()
	for range s.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s.handlers.queue.ProcessNext(ctx, "scan", s.evaluator.reconcile) {
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sched.run(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.readyWhenSynced(ctx)
	}()
	<-ctx.Done()
	s.handlers.queue.ShutDown()
	s.handlers.control.queue.ShutDown()
	s.handlers.kinds.stop()
	wg.Wait()
	s.reconciler.statusWrites.Wait()
	return nil
}

// retry runs fn until it succeeds, with exponential backoff (0.5 s to
// 30 s), logging each failure. It fails only when ctx ends.
func retry(ctx context.Context, clk clock.Clock, what string, fn func() error) error {
	delay := 500 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		logr.FromContextOrDiscard(ctx).Error(err, what+" failed; retrying", "after", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// readyWhenSynced makes the hand-over ready once everything was listed and
// scanned: the merger then lists a complete set.
func (s *Scanner) readyWhenSynced(ctx context.Context) {
	t := s.opts.Clock.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !s.Synced() {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
	s.opts.Handover.SetReady()
	logr.FromContextOrDiscard(ctx).Info("scanned everything: the merger may read the reports", "reports", s.opts.Handover.Len())
}

// Handover is where the scanner hands its BackgroundScanReports over.
func (s *Scanner) Handover() *handover.Hub { return s.opts.Handover }

// Synced reports whether the policies and every kind they need were listed
// once and applied, and the queues are empty: the reports reflect the
// cluster.
func (s *Scanner) Synced() bool { return s.handlers.synced() }

// DataForbidden records, as a Warning Event on the policy, that a read of
// the data it needs was refused (R39).
func (s *Scanner) DataForbidden(key string, err error) {
	tp := s.handlers.policies.get(key)
	if tp == nil || tp.ref == nil || s.opts.ReadEvents == nil {
		return
	}
	s.opts.ReadEvents.Eventf(tp.ref, corev1.EventTypeWarning, "DataForbidden", "tally cannot read data the policy needs: %v", err)
}

// RescanPolicies queues every resource the policies (by key: "name", or
// "namespace/name" for a Policy) can match: the data they read changed.
func (s *Scanner) RescanPolicies(keys []string) { s.handlers.enqueuePolicies(keys) }

// Rescan queues one resource (by UID) for evaluation, as a change would:
// the admission recorder hands over the resources whose results it could
// not keep (admission.RecorderOptions.OnOverflow).
func (s *Scanner) Rescan(uid string) { s.handlers.queue.Add(uid) }

// PolicyResourceVersion is the resourceVersion of a policy as the scanner
// last saw it ("" if unknown): for diagnostics and tests.
func (s *Scanner) PolicyResourceVersion(name string) string {
	p, err := s.handlers.store.Read().Policy(name)
	if err != nil || p == nil {
		return ""
	}
	return p.ResourceVersion
}

// ScanPolicy re-evaluates every resource a policy can match, now. Nothing is
// written for resources whose results did not change.
func (s *Scanner) ScanPolicy(ctx context.Context, name string) error {
	tp := s.handlers.policies.get(name)
	if tp == nil {
		return fmt.Errorf("policy %s is not scanned", name)
	}
	return s.sched.scanNow(ctx, tp)
}

// RescanAll re-evaluates every stored resource (a forced full rescan); it
// completes the scan of every policy.
func (s *Scanner) RescanAll(ctx context.Context) error {
	start := s.opts.Clock.Now()
	all, err := s.handlers.store.Read().Resources()
	if err != nil {
		return err
	}
	uids := make([]string, len(all))
	for i, r := range all {
		uids[i] = r.UID
	}
	if err := s.evaluator.reconcileAll(ctx, uids, nil); err != nil {
		return err
	}
	for _, tp := range s.handlers.policies.active() {
		s.sched.complete(ctx, tp.name, start)
	}
	return nil
}

// watchUnevaluated watches the unevaluated kinds discovery serves, each
// in its newest served version, and follows those not served yet (Kyverno
// installed after tally): each is watched once served, in the first of its
// versions served then. The returned function ends the following and waits
// for the watches to stop.
func (s *Scanner) watchUnevaluated(ctx context.Context) (stop func()) {
	sink := &unevaluatedSink{recorder: s.opts.Recorder, metrics: s.handlers.metrics}
	var mu sync.Mutex
	var sources []*watch.Source
	watched := map[string]bool{} // by resource
	start := func(gvr schema.GroupVersionResource) {
		mu.Lock()
		defer mu.Unlock()
		if watched[gvr.Resource] || ctx.Err() != nil {
			return
		}
		watched[gvr.Resource] = true
		sources = append(sources, watch.Start(ctx, s.client, gvr, sink))
	}
	for _, gvr := range s.handlers.kinds.servedUnevaluatedKinds() {
		start(gvr)
	}
	var later []schema.GroupVersionResource
	for _, k := range catalog.Kinds(catalog.KyvernoOnly) {
		if watched[k.GVR.Resource] {
			continue
		}
		for _, v := range k.Versions {
			later = append(later, schema.GroupVersionResource{Group: k.GVR.Group, Version: v, Resource: k.GVR.Resource})
		}
	}
	followCtx, endFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		if len(later) > 0 {
			watch.FollowServed(followCtx, s.handlers.kinds.disc, s.opts.Clock, later, start)
		}
	}()
	return func() {
		endFollow()
		<-followed
		mu.Lock()
		defer mu.Unlock()
		for _, src := range sources {
			src.Stop()
		}
	}
}
