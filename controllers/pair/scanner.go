package pair

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/scan"
	"github.com/tally-dev/tally/controllers/shard"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/internal/process"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// ScannerOptions are what the scanner of a pair runs with:
// tally-scanner's flags.
type ScannerOptions struct {
	process.Options
	Workers     int
	Interval    time.Duration
	EvalTimeout time.Duration
	// StateConfigMap persists each policy's last complete scan.
	StateConfigMap string
	// Sharding divides the namespaces among the live pairs (shard.Run);
	// off, one replica leads (process.Options.LeaderElect) and scans
	// everything. The chart shards.
	Sharding   bool
	ShardGroup string
	// PodUID, sharded, is the UID of the Pod (named Identity) that owns the
	// membership Lease.
	PodUID          string
	RescanEndpoint  bool
	MaxQueuedEvents int
	EventsQPS       float64
	PolicyStatus    bool
	SuccessEvents   bool
	OmitEvents      map[string]bool
	// Exceptions are --exception-namespace and
	// --cluster-exception-namespaces (R47).
	Exceptions engine.ExceptionScope
	// TenantServiceAccount is --tenant-service-account: the ServiceAccount
	// of each namespace whose identity its policies' cluster reads take
	// (R47; empty: such reads are errors).
	TenantServiceAccount string
	// TenantReadTimeout is --tenant-read-timeout.
	TenantReadTimeout time.Duration
	// MAPReports is --mutating-admission-policy-reports (R44).
	MAPReports bool
	Webhook    WebhookOptions
	Handover   HandoverOptions
	HTTP       data.HTTPOptions
	Images     data.RegistryOptions
	// ImageVerify configures verifyImages rules' verification.
	ImageVerify ImageOptions
	// Clock times what the scanner waits for (nil: the real clock).
	Clock clock.WithTicker
}

// WebhookOptions configure the admission bridge (Listen empty: off).
type WebhookOptions struct {
	Listen, CertDir, Secret, DNSNames, Configuration, ClientCA string
	Timeout                                                    time.Duration
	ManageRules, RecordRecomputed                              bool
}

// HandoverOptions say where the merger reads the BackgroundScanReports and
// which final reports the results are read back from after a restart.
type HandoverOptions struct {
	Listen, ReportAPI, ManagedBy string
}

// scannerRun is one run of a pair's scanner process: the clients, the
// parts every replica runs (the data loader, the Event queue, the
// admission recorder and bridge, the hand-over server) and the scanner of
// the current shard.
type scannerRun struct {
	o          ScannerOptions
	dyn        dynamic.Interface
	disc       discovery.DiscoveryInterface
	scheme     *runtime.Scheme
	readEvents func() record.EventRecorder
	emitter    func(controller string) *policyevents.Emitter
	api        report.API
	loader     *data.Loader
	// images verifies images for the scan and the webhook alike, with one
	// cache (R43); nil when --verify-images is off.
	images   engine.ImageVerifier
	policies *catalog.Catalog
	hubs     *handover.Switch
	// bridge is the admission bridge (nil: the webhook is off).
	bridge *admission.Bridge
	// current is the scanner of this run (sharded: of the current shard).
	current atomic.Pointer[scan.Scanner]
}

// RunScanner runs a pair's scanner until ctx ends or a part of it fails:
// the background scan (of everything while leading, or of the shard this
// replica is given), the admission bridge on every replica, and the
// hand-over the merger beside it reads. It owns every goroutine it starts
// and returns once they have all ended.
func RunScanner(ctx context.Context, o ScannerOptions) error {
	reportAPI, err := report.ParseAPI(o.Handover.ReportAPI)
	if err != nil {
		return fmt.Errorf("--report-api: %w", err)
	}
	env, err := newEnv(&o.Options, envOptions{Clock: o.Clock})
	if err != nil {
		return err
	}
	o.Clock = env.Clock
	cfg, dyn, kube, disc, reg := env.Config, env.Dynamic, env.Kube, env.Discovery, env.Registry
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), api.AddToScheme(scheme)); err != nil {
		return err
	}
	handoverListener, err := net.Listen("tcp", o.Handover.Listen)
	if err != nil {
		return fmt.Errorf("--handover-listen: %w", err)
	}
	defer func() { _ = handoverListener.Close() }() // closed by the hand-over server already, or never served

	// Events go as protobuf: the API server decodes and stores them at a
	// fraction of the CPU of JSON (thousands in a first scan of a large
	// cluster).
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType, pcfg.AcceptContentTypes = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON
	events, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	// Result Events go through events.k8s.io/v1, as Kyverno's, written by
	// tally's Writer (not client-go's broadcaster, which would keep each for
	// minutes to count repeats tally never makes), from a queue sent at a
	// pace the client's rate limit allows.
	eventQueue := policyevents.NewQueue(o.MaxQueuedEvents, o.EventsQPS, reg)

	r := &scannerRun{o: o, dyn: dyn, disc: disc, scheme: scheme, api: reportAPI, policies: catalog.New(), hubs: &handover.Switch{}}
	r.readEvents = func() record.EventRecorder {
		return broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "tally-scanner"})
	}
	// The Event writers are this run's: they write on a context that ends
	// with it, and it waits for the Events they are writing before it
	// returns.
	writersCtx, stopWriters := context.WithCancel(ctx)
	var writersMu sync.Mutex
	var writers []*policyevents.Writer
	defer func() {
		stopWriters()
		writersMu.Lock()
		defer writersMu.Unlock()
		for _, w := range writers {
			w.Wait()
		}
	}()
	r.emitter = func(controller string) *policyevents.Emitter {
		w := policyevents.NewWriter(writersCtx, events.EventsV1(), scheme, controller).WithClock(o.Clock)
		writersMu.Lock()
		writers = append(writers, w)
		writersMu.Unlock()
		return &policyevents.Emitter{Recorder: eventQueue.Recorder(w), Success: o.SuccessEvents, Omit: o.OmitEvents}
	}
	// The data policies read: a change rescans the policies that read it.
	// Every registry connection (image checks, image data) is guarded.
	guard := newRegistryGuard(o.ImageVerify, kube)
	registryTransport := guard.Transport()
	images := o.Images
	images.Client, images.Namespace, images.Transport = kube, o.Namespace, registryTransport
	var tenants data.Tenants
	if o.TenantServiceAccount != "" {
		tenants = &data.Impersonating{Config: cfg, ServiceAccount: o.TenantServiceAccount}
	}
	r.loader = data.New(dyn, kube.Discovery().RESTClient(), data.Options{Registry: reg, HTTP: o.HTTP, Images: images, Clock: o.Clock,
		Tenants: tenants, TenantReadTimeout: o.TenantReadTimeout,
		OnChange: func(policies []string) {
			if s := r.current.Load(); s != nil {
				s.RescanPolicies(policies)
			}
		},
		OnForbidden: func(policy string, err error) {
			if s := r.current.Load(); s != nil {
				s.DataForbidden(policy, err)
			}
		}})

	r.images = newImageVerifier(o, kube, tenants, registryTransport, reg)
	daemon, leading, err := r.daemon(kube, reg)
	if err != nil {
		return err
	}
	o = r.o // the daemon's process options (sharded: no leader election)
	// The webhook's admission results are written by one recorder; past
	// its bound it hands a resource to a background rescan instead of
	// growing.
	recorder := admission.NewRecorder(dyn, admission.RecorderOptions{Registry: reg, OnOverflow: func(uid string) {
		if s := r.current.Load(); s != nil {
			s.Rescan(uid)
		}
	}})
	handlers := process.Handlers{}
	if o.RescanEndpoint {
		handlers["/rescan"] = http.HandlerFunc(r.serveRescan)
	}
	if o.Webhook.Listen != "" {
		r.bridge = r.newBridge(kube, reg, recorder, leading)
		o.ReadyChecks = append(o.ReadyChecks, func() string {
			if !r.bridge.Serving() {
				return "admission webhook not serving yet"
			}
			return ""
		})
		daemon.setOnStart(r.bridge.Kick)
	}

	// Every part runs until ctx ends; one that stops (the webhook cannot
	// listen, the scan fails) stops the others.
	g, gctx := errgroup.WithContext(ctx)
	gctx, cancel := context.WithCancel(gctx)
	defer cancel()
	part := func(run func(context.Context) error) {
		g.Go(func() error {
			defer cancel()
			return run(gctx)
		})
	}
	part(func(ctx context.Context) error { recorder.Run(ctx); return nil })
	part(r.loader.Run)
	part(func(ctx context.Context) error { return guard.run(ctx, o.Clock) })
	part(func(ctx context.Context) error { eventQueue.Run(ctx); return nil })
	part(func(ctx context.Context) error { return r.hubs.Serve(ctx, handoverListener) })
	if r.bridge != nil {
		part(r.bridge.Run)
	}
	part(func(ctx context.Context) error { return process.Run(ctx, o.Options, cfg, reg, daemon, handlers) })
	return g.Wait()
}

// scanDaemon is the scan as process.Run runs it; setOnStart tells the
// admission bridge when a run starts (it then writes the webhook's rules
// if this replica leads).
type scanDaemon interface {
	process.Daemon
	setOnStart(func())
}

// daemon builds the scan of this replica: sharded, a scanner per shard it
// is given; else one scanner, run while leading. leading says whether this
// replica writes the webhook's rules.
func (r *scannerRun) daemon(kube kubernetes.Interface, reg *prometheus.Registry) (scanDaemon, func() bool, error) {
	if r.o.Sharding {
		sd := &shardedDaemon{run: r, metrics: &process.Switch{},
			opts: shard.Options{Client: kube, Namespace: r.o.Namespace, Group: r.o.ShardGroup, Identity: r.o.Identity, Registry: reg,
				Recorder: r.readEvents(), Clock: r.o.Clock}}
		if r.o.PodUID != "" {
			sd.opts.Owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: r.o.Identity, UID: types.UID(r.o.PodUID)}
		}
		r.o.LeaderElect = false // every replica works, on its own shard
		r.o.Gatherers = append(r.o.Gatherers, sd.metrics)
		return sd, sd.ownsClusterShard, nil
	}
	s, err := r.newScanner(handover.New(handover.Options{Registry: reg, Now: r.o.Clock.Now, Clock: r.o.Clock}), reg, nil)
	if err != nil {
		return nil, nil, err
	}
	ld := &leadingDaemon{Scanner: s}
	return ld, ld.leading.Load, nil
}

// newScanner builds the scanner of a run: of everything, or of a shard
// (owns); the replica that owns the cluster-scoped shard keeps the
// policies' status and the scan state.
func (r *scannerRun) newScanner(hub *handover.Hub, reg prometheus.Registerer, owns func(string) bool) (*scan.Scanner, error) {
	store, err := memstore.New()
	if err != nil {
		return nil, err
	}
	o := r.o
	clusterShard := owns == nil || owns("")
	// Warnings about the policies themselves (rejected, a kind that cannot
	// be served) come from one replica: the one keeping their status.
	// Those about a read refused (a kind's list, a policy's data) from
	// every replica: each reads its own namespaces.
	readEvents := r.readEvents()
	var policyEvents record.EventRecorder
	if clusterShard {
		policyEvents = readEvents
	}
	s := scan.New(r.dyn, memory.NewMemCacheClient(r.disc), store, scan.Options{
		Catalog: r.policies, Clock: o.Clock,
		Workers: o.Workers, Interval: o.Interval, EvalTimeout: o.EvalTimeout, StateNamespace: o.Namespace, StateName: o.StateConfigMap,
		Registry: reg, Recorder: policyEvents, ReadEvents: readEvents,
		NoPolicyStatus: !o.PolicyStatus || !clusterShard,
		Handover:       hub, FinalReports: scan.FinalReports{API: r.api, ManagedBy: o.Handover.ManagedBy},
		// Result Events are reported as Kyverno's background scans report them.
		Events: r.emitter(policyevents.ControllerScan),
		Loader: r.loader,
		Data:   r.loader,
		Images: r.images,
		Shard:  owns, StateReadOnly: !clusterShard,
		Exceptions:                     o.Exceptions,
		MutatingAdmissionPolicyReports: o.MAPReports,
	})
	if o.Webhook.Listen != "" && o.Webhook.ManageRules && o.Webhook.Configuration != "" {
		// The bridge is made after the unsharded scanner, before either runs.
		s.SetWebhookConfigured(func(policy string, generation int64) bool { return r.bridge.WebhookConfigured(policy, generation) })
	}
	r.current.Store(s)
	r.hubs.Set(hub)
	return s, nil
}

// newBridge builds the admission bridge: it writes the webhook's rules
// while this replica leads (sharded: owns the cluster-scoped shard), and
// the scanner marks a policy with admission on Ready once those rules send
// its requests.
func (r *scannerRun) newBridge(kube kubernetes.Interface, reg prometheus.Registerer, recorder *admission.Recorder, leading func() bool) *admission.Bridge {
	o := r.o
	var dnsNames []string
	for _, n := range strings.Split(o.Webhook.DNSNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			dnsNames = append(dnsNames, n)
		}
	}
	// What the scan recomputes is left to it (coverage.go).
	var scanned func(context.Context, schema.GroupVersionResource) bool
	if !o.Webhook.RecordRecomputed {
		scanned = admission.NewCoverage(kube.AuthorizationV1().SelfSubjectAccessReviews(), 0).Scanned
	}
	return admission.New(r.dyn, kube, memory.NewMemCacheClient(r.disc), admission.Options{
		Catalog: r.policies,
		Listen:  o.Webhook.Listen, CertDir: o.Webhook.CertDir,
		SecretNamespace: o.Namespace, SecretName: o.Webhook.Secret, DNSNames: dnsNames,
		WebhookConfiguration: o.Webhook.Configuration, Timeout: o.Webhook.Timeout,
		ManageRules: o.Webhook.ManageRules, Leading: leading, ClientCAFile: o.Webhook.ClientCA, Recorder: recorder, Registry: reg,
		Loader: r.loader, Data: r.loader, Images: r.images, Events: r.emitter(policyevents.ControllerAdmission),
		Scanned: scanned, Exceptions: o.Exceptions,
	})
}

// serveRescan forces a full rescan (POST /rescan, --rescan-endpoint).
func (r *scannerRun) serveRescan(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST to force a full rescan", http.StatusMethodNotAllowed)
		return
	}
	s := r.current.Load()
	if s == nil {
		http.Error(w, "the scanner has not started yet", http.StatusServiceUnavailable)
		return
	}
	if err := s.RescanAll(req.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("rescanned")) // the client went away: nothing to tell it
}

// leadingDaemon runs the scanner while this replica leads (or always,
// without leader election), and tells the admission bridge: it writes the
// webhook's rules only then, and is asked for a pass when leading starts.
type leadingDaemon struct {
	*scan.Scanner
	leading atomic.Bool
	onStart func()
}

func (d *leadingDaemon) setOnStart(f func()) { d.onStart = f }

func (d *leadingDaemon) Run(ctx context.Context) error {
	d.leading.Store(true)
	defer d.leading.Store(false)
	if d.onStart != nil {
		d.onStart()
	}
	return d.Scanner.Run(ctx)
}

// shardedDaemon runs a scanner on each shard this replica is given among
// the live replicas (shard.Run): a new store, hand-over and metrics for
// each, so that nothing of a shard it lost stays behind.
type shardedDaemon struct {
	run        *scannerRun
	opts       shard.Options
	metrics    *process.Switch
	onStart    func()
	assignment atomic.Pointer[shard.Assignment]
	// synced says a shard was scanned once: the replica stays ready
	// (serving the webhook) while it rescans a new shard.
	synced atomic.Bool
}

func (d *shardedDaemon) setOnStart(f func()) { d.onStart = f }

func (d *shardedDaemon) Run(ctx context.Context) error {
	return shard.Run(ctx, d.opts, func(ctx context.Context, a shard.Assignment) error {
		reg := prometheus.NewRegistry()
		hub := handover.New(handover.Options{Registry: reg, Now: d.run.o.Clock.Now, Clock: d.run.o.Clock, Shard: handover.Shard{Self: a.Self, Members: a.Members}})
		s, err := d.run.newScanner(hub, reg, a.Owns)
		if err != nil {
			return err
		}
		d.metrics.Set(reg)
		d.assignment.Store(&a)
		defer func() {
			d.assignment.Store(nil)
			// A hand-over never ready: the merger beside stops at once.
			d.run.hubs.Set(handover.New(handover.Options{Now: d.run.o.Clock.Now, Clock: d.run.o.Clock}))
		}()
		if d.onStart != nil {
			d.onStart()
		}
		return s.Run(ctx)
	})
}

// Synced: a shard was scanned once, or the current one is.
func (d *shardedDaemon) Synced() bool {
	if d.synced.Load() {
		return true
	}
	s := d.run.current.Load()
	if s != nil && s.Synced() {
		d.synced.Store(true)
		return true
	}
	return false
}

// ownsClusterShard: this replica keeps the webhook's rules (the one owning
// the cluster-scoped shard).
func (d *shardedDaemon) ownsClusterShard() bool {
	a := d.assignment.Load()
	return a != nil && a.Owns("")
}
