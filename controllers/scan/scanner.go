package scan

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/memstore"
)

// classicPolicySources are the kinds always listed before any resource is
// evaluated.
var classicPolicySources = []schema.GroupVersionResource{apiresources.Namespace, apiresources.PolicyException, apiresources.ClusterPolicy, apiresources.Policy}

// Options configure a Scanner.
type Options struct {
	// Workers evaluate resources in parallel.
	Workers int
	// Interval is the global background scan interval (a policy may override it).
	Interval time.Duration
	// EvalTimeout bounds the evaluation of one resource (DefaultEvalTimeout).
	EvalTimeout time.Duration
	// StateNamespace and StateName locate the ConfigMap that persists each
	// policy's last complete scan.
	StateNamespace, StateName string
	Clock                     clock.WithTicker
	Registry                  prometheus.Registerer
	// Recorder records Warnings about the policies themselves (rejected, a
	// kind discovery does not serve): sharded, the replica keeping their
	// status sets it, the others leave it nil.
	Recorder record.EventRecorder
	// ReadEvents records Warnings about reads this scanner was refused (a
	// kind's list, a policy's data; default: Recorder). Sharded, every
	// replica sets it: each reads its own namespaces, and a read it alone
	// made is seen by no other.
	ReadEvents record.EventRecorder
	// Events, when set, records Events of background results on the
	// policies and resources (events.go); its recorder reports as
	// policyevents.ControllerScan.
	Events *policyevents.Emitter
	// Handover receives the BackgroundScanReports, for the merger beside
	// the scanner (nil: New makes one, read through Scanner.Handover). Run
	// makes it ready once everything was scanned.
	Handover *handover.Hub
	// FinalReports are the final reports the scanner reads its results back
	// from after a restart (default: tally's wgpolicyk8s.io reports).
	FinalReports FinalReports
	// Loader loads the cluster data context entries read (nil: none, they
	// are errors).
	Loader engine.ContextLoader
	// Catalog compiles the policies, shared with the admission bridge so
	// that each version is compiled once (nil: compiled here, unshared).
	Catalog *catalog.Catalog
	// Data serves the cluster reads of CEL policies (nil: none, they are
	// errors).
	Data cel.ClusterData
	// NoPolicyStatus leaves the policies' status alone (beside a Kyverno
	// that writes it); by default tally keeps their Ready condition.
	NoPolicyStatus bool
	// WebhookConfigured, when set, says whether the admission webhook's
	// configuration sends tally the requests of a policy (by report name)
	// at a generation (admission.Bridge.WebhookConfigured). A policy with
	// admission on is marked Ready only once it does, as Kyverno waits for
	// its webhook: a user who creates a resource once the policy is Ready
	// gets its admission result. SetWebhookConfigured sets it after New.
	WebhookConfigured func(policy string, generation int64) bool
	// Shard, when set, is the namespaces this replica scans (its shard of
	// the live scanner pairs: shard.Assignment.Owns; "" stands for the
	// cluster-scoped resources). Only those are watched, held, seeded from
	// the final reports and handed over; nil scans everything.
	Shard func(namespace string) bool
	// StateReadOnly reads the scan state but never writes it (a sharded
	// replica that does not own the cluster-scoped shard: one replica
	// writes it).
	StateReadOnly bool
	// ExceptionNamespace, when set (not "*"), is the one namespace
	// PolicyExceptions are taken from, as Kyverno's --exceptionNamespace
	// (R47); by default, as Kyverno's, every namespace.
	ExceptionNamespace string
	// MutatingAdmissionPolicyReports scans MutatingAdmissionPolicies with
	// their bindings (R44), as Kyverno's --mutatingAdmissionPolicyReports
	// (off by default, as Kyverno's): where the API server serves them.
	MutatingAdmissionPolicyReports bool
}

// SetWebhookConfigured sets Options.WebhookConfigured, for a bridge made
// after the scanner; call it before Run.
func (s *Scanner) SetWebhookConfigured(f func(policy string, generation int64) bool) {
	s.opts.WebhookConfigured = f
}

// Scanner keeps the store in step with the cluster and writes the
// BackgroundScanReports. It is safe for one Run at a time.
//
// It is the watches' sink and the queue's worker, and coordinates types
// with one job each: the policy set (policies), the watched kinds (kinds),
// the periodic scans (sched) and the report writer (reports); the store
// holds resources and results.
type Scanner struct {
	// leftOutTold: the generation of each policy whose rules left out were
	// told in an Event (status.go tellLeftOut).
	leftOutTold sync.Map
	opts        Options
	client      dynamic.Interface
	store       *memstore.Store
	// queue holds the UIDs of resources to evaluate; control the changes
	// of policies, exceptions and bindings to apply (control.go).
	queue    *watch.Queue
	control  *controlQueue
	reports  *reportWriter
	metrics  *metrics
	policies *policySet
	kinds    *kindWatch
	sched    *scheduler
	// vaps and maps are the ValidatingAdmissionPolicies and
	// MutatingAdmissionPolicies scanned, with their bindings.
	vaps, maps *admissionPolicySet
	// exceptions applies the PolicyExceptions' changes.
	exceptions *exceptionSet
	params     *paramCache
	locks      keyedMutex
	// deferred holds the resources met before the policies were listed;
	// they are queued once, when the policies are (reconcile.go).
	deferred deferredSet
	// statusWrites counts the goroutines writing policy status (status.go);
	// running says Run is on (status is written only then).
	statusWrites sync.WaitGroup
	running      atomic.Bool
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
	s := &Scanner{
		opts:     opts,
		client:   client,
		store:    store,
		queue:    watch.NewQueue("tally-scan"),
		policies: newPolicySet(),
	}
	s.control = newControlQueue(s.applyEvent, s.dropMissing, func(gvr schema.GroupVersionResource) { s.listedIn(gvr, "") })
	s.exceptions = &exceptionSet{store: store, rescan: s.enqueuePolicies, namespace: opts.ExceptionNamespace,
		ignored: func(u *unstructured.Unstructured) {
			s.metrics.exceptionsIgnored.Inc()
			if s.opts.Recorder != nil { // the replica keeping the policies' status tells
				s.opts.Recorder.Eventf(u, corev1.EventTypeWarning, "PolicyExceptionIgnored",
					"tally takes PolicyExceptions only from namespace %s (--exception-namespace): this one does not apply", opts.ExceptionNamespace)
			}
		}}
	s.vaps = newAdmissionPolicySet(validatingAdmissionPolicies, s.upsertPolicy, s.removePolicy)
	s.maps = newAdmissionPolicySet(mutatingAdmissionPolicies, s.upsertPolicy, s.removePolicy)
	s.kinds = newKindWatch(client, disc, s)
	s.kinds.owns = opts.Shard
	s.params = newParamCache(client, s.kinds, opts.Clock)
	s.metrics = newMetrics(opts.Registry, func() float64 { return float64(s.queue.Len()) }, func() float64 {
		n, _ := store.Read().CountResources()
		return float64(n)
	}, func() float64 { return float64(s.queue.Panics() + s.control.queue.Panics() + watch.SinkPanics()) })
	if opts.Shard != nil {
		opts.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_shard_namespaces_owned",
			Help: "Namespaces of this replica's shard that exist (their resources are watched here; tally_scan_stored_resources counts them)."},
			func() float64 { return float64(s.kinds.ownedNamespaces()) }))
	}
	if s.opts.Handover == nil {
		s.opts.Handover = handover.New(handover.Options{})
	}
	s.reports = newReportWriter(client, s.opts.Handover, s.metrics, opts.FinalReports)
	s.reports.owns = s.owns
	state := newScanState(client, opts.StateNamespace, opts.StateName)
	state.readOnly = opts.StateReadOnly
	s.sched = &scheduler{clock: opts.Clock, store: store, state: state,
		metrics: s.metrics, policies: s.policies, ready: s.Synced, scan: s.scanPolicy,
		protect: func(ctx context.Context, what string, fn func()) { s.queue.Protect(ctx, what, fn) }}
	return s
}

// Run starts watching, evaluating and scheduling, and blocks until ctx ends.
func (s *Scanner) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("scan")
	ctx = logr.NewContext(ctx, log)
	defer s.queue.ShutDown()
	defer s.control.queue.ShutDown()
	s.running.Store(true)
	defer s.running.Store(false)
	// Existing reports and the scan state are read before anything else;
	// an unreachable API server is waited for (with backoff), not fatal.
	var seeded int
	if err := retry(ctx, "reading existing reports", func() (err error) {
		seeded, err = s.reports.seed(ctx, s.seedResults)
		return err
	}); err != nil {
		return nil // ctx ended
	}
	if err := retry(ctx, "reading the scan state", func() error {
		err := s.sched.state.load(ctx, s.store)
		if apierrors.IsForbidden(err) {
			log.Error(err, "the scan state cannot be read; policies are scanned as if never scanned")
			return nil
		}
		return err
	}); err != nil {
		return nil
	}
	log.Info("seeded from the final reports", "reports", seeded)

	// The CEL kinds are watched when served (tally's CRDs, or Kyverno's
	// beside it); an older Kyverno has none, and classic policies go on.
	s.kinds.start(ctx, append(slices.Clone(classicPolicySources), s.kinds.servedCELKinds(ctx, s.opts.MutatingAdmissionPolicyReports)...))
	// Kinds Kyverno evaluates and tally does not: told, not scanned (R46).
	stopUnevaluated := s.watchUnevaluated(ctx)
	defer stopUnevaluated()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.control.run(ctx)
	}()
	for range s.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s.processNext(ctx) {
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
	s.queue.ShutDown()
	s.control.queue.ShutDown()
	s.kinds.stop()
	wg.Wait()
	s.statusWrites.Wait()
	return nil
}

// retry runs fn until it succeeds, with exponential backoff (0.5 s to
// 30 s), logging each failure. It fails only when ctx ends.
func retry(ctx context.Context, what string, fn func() error) error {
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
		case <-time.After(delay):
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
// cluster. The control queue is asked first: what it applies may need
// kinds not listed yet.
func (s *Scanner) Synced() bool {
	return s.control.queue.Idle() && s.kinds.listedAll() && s.queue.Idle()
}

func (s *Scanner) processNext(ctx context.Context) bool {
	return s.queue.ProcessNext(ctx, "scan", s.reconcile)
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

// DataForbidden records, as a Warning Event on the policy, that a read of
// the data it needs was refused (R39).
func (s *Scanner) DataForbidden(key string, err error) {
	tp := s.policies.get(key)
	if tp == nil || tp.ref == nil || s.opts.ReadEvents == nil {
		return
	}
	s.opts.ReadEvents.Eventf(tp.ref, corev1.EventTypeWarning, "DataForbidden", "tally cannot read data the policy needs: %v", err)
}

// RescanPolicies queues every resource the policies (by key: "name", or
// "namespace/name" for a Policy) can match: the data they read changed.
func (s *Scanner) RescanPolicies(keys []string) { s.enqueuePolicies(keys) }

// Rescan queues one resource (by UID) for evaluation, as a change would:
// the admission recorder hands over the resources whose results it could
// not keep (admission.RecorderOptions.OnOverflow).
func (s *Scanner) Rescan(uid string) { s.queue.Add(uid) }

// PolicyResourceVersion is the resourceVersion of a policy as the scanner
// last saw it ("" if unknown): for diagnostics and tests.
func (s *Scanner) PolicyResourceVersion(name string) string {
	p, err := s.store.Read().Policy(name)
	if err != nil || p == nil {
		return ""
	}
	return p.ResourceVersion
}
