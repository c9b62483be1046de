// Command tally-scanner is tally's scan engine: it keeps the store in step
// with the cluster, evaluates the background-enabled validate rules and
// writes BackgroundScanReports (while leading, or, with --sharding, for the
// namespaces of its shard). Every replica also serves the admission bridge
// (--webhook-listen), outside leader election and sharding.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/textlogger"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/scan"
	"github.com/tally-dev/tally/controllers/shard"
	"github.com/tally-dev/tally/internal/process"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

type options struct {
	process.Options
	workers         int
	interval        time.Duration
	evalTimeout     time.Duration
	stateConfigMap  string
	sharding        bool
	shardGroup      string
	podUID          string
	rescanEndpoint  bool
	maxQueuedEvents int
	eventsQPS       float64
	policyStatus    bool
	successEvents   bool
	omitEvents      map[string]bool
	// exceptionNamespace is --exception-namespace (R47).
	exceptionNamespace string
	// mapReports is --mutating-admission-policy-reports (R44).
	mapReports bool
	webhook    webhookOptions
	handover   handoverOptions
	http       data.HTTPOptions
	images     data.RegistryOptions
}

type webhookOptions struct {
	listen, certDir, secret, dnsNames, configuration, clientCA string
	timeout                                                    time.Duration
	manageRules, recordRecomputed                              bool
}

// handoverOptions say where the merger reads the BackgroundScanReports and
// which final reports the results are read back from after a restart.
type handoverOptions struct {
	listen, reportAPI, managedBy string
}

func main() {
	o := bindFlags(flag.CommandLine)
	process.ParseFlags("tally-scanner", "tally-scanner scans the cluster's resources against Kyverno policies in the background and serves the admission\nbridge, writing one AdmissionReport per admitted resource and handing one BackgroundScanReport per resource to\nthe merger beside it (--handover-listen).", flag.CommandLine, os.Args[1:])

	if err := o.check(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\nRun 'tally-scanner --help' for usage.\n", err)
		os.Exit(2)
	}
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.Verbosity)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(logr.NewContext(ctx, log), *o)
	stop()
	if err != nil {
		log.Error(err, "tally-scanner failed")
		os.Exit(1)
	}
}

// bindFlags binds tally-scanner's flags to the options they set.
func bindFlags(fs *flag.FlagSet) *options {
	o := &options{}
	o.Bind(fs, "tally-scanner")
	fs.IntVar(&o.workers, "workers", 2, "resources evaluated in parallel")
	fs.DurationVar(&o.interval, "background-scan-interval", time.Hour, "global background scan interval (policies may override it)")
	fs.DurationVar(&o.evalTimeout, "evaluation-timeout", scan.DefaultEvalTimeout, "time limit of one resource's background evaluation; past it the rules left are error results and the worker moves on")
	fs.StringVar(&o.stateConfigMap, "state-configmap", "tally-scan-state", "ConfigMap persisting each policy's last complete scan")
	fs.BoolVar(&o.policyStatus, "policy-status", true, "keep each policy's Ready condition (turn off beside a Kyverno that writes it)")
	fs.BoolVar(&o.successEvents, "generate-success-events", false, "also emit an Event (Normal, PolicyApplied) on a policy when its results on a resource pass, as Kyverno's generateSuccessEvents; violations always get one (Warning, PolicyViolation) on the policy and the resource, in the background once per change to fail")
	fs.Func("omit-events", "comma-separated reasons of result Events not to emit, as Kyverno's omitEvents: PolicyViolation, PolicyApplied (PolicyError and PolicySkipped are accepted; tally emits neither)", func(v string) error {
		omit, err := policyevents.ParseOmit(v)
		o.omitEvents = omit
		return err
	})
	fs.Func("http-allow", "URL patterns (* and ? wildcards; comma-separated, repeatable) of the services policies may call: apiCall.service entries and CEL's http.Get/Post; none by default", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.http.Allow = append(o.http.Allow, p)
			}
		}
		return nil
	})
	fs.DurationVar(&o.http.Timeout, "http-timeout", data.DefaultHTTPTimeout, "time limit of one call to a service")
	fs.BoolVar(&o.images.Enabled, "registry-access", false, "let policies read image registries (imageRegistry context entries, CEL's image.GetMetadata); each image digest is read once")
	fs.Func("image-pull-secrets", "pull secrets (in --namespace; comma-separated, repeatable) for registry reads, besides those an entry names; grant tally-scanner get on them", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.images.PullSecrets = append(o.images.PullSecrets, p)
			}
		}
		return nil
	})
	fs.StringVar(&o.handover.listen, "handover-listen", "127.0.0.1:8095", "loopback address where the merger beside the scanner reads the BackgroundScanReports (kyverno.io/v2 list and watch; kubectl --server http://<address> get bgscanr -A shows them)")
	fs.StringVar(&o.handover.reportAPI, "report-api", string(report.APIWGPolicy), "the API of the final reports the merger writes (wgpolicyk8s or openreports): the scanner reads its results back from them after a restart")
	fs.StringVar(&o.handover.managedBy, "managed-by", report.ManagedBy, "the app.kubernetes.io/managed-by label of the final reports the merger writes (the merger's --managed-by)")
	fs.IntVar(&o.maxQueuedEvents, "max-queued-events", policyevents.DefaultMaxQueuedEvents, "result Events that may wait to be sent; past it new ones are dropped (tally_events_dropped_total), as Kyverno's --maxQueuedEvents")
	fs.Float64Var(&o.eventsQPS, "events-qps", policyevents.DefaultEventsQPS, "result Events sent a second at most (below --kube-api-qps, the rate limit of their client)")
	fs.BoolVar(&o.sharding, "sharding", false, "divide the namespaces among the live replicas through a membership Lease each (tally-member-<identity>): each replica scans, and its merger writes, only its shard; off, one replica leads (--leader-elect) and the others wait")
	fs.StringVar(&o.shardGroup, "shard-group", "tally-scanner", "the replicas that shard together (the tally.dev/shard-member label of their Leases)")
	fs.StringVar(&o.podUID, "pod-uid", "", "with --sharding, the UID of the Pod this replica runs in, whose name is --identity: the Pod owns the membership Lease, and the garbage collector deletes the Lease of a Pod deleted without warning")
	fs.BoolVar(&o.mapReports, "mutating-admission-policy-reports", false, "report MutatingAdmissionPolicies in background scans (pass when applied, fail \"mutation is not applied\"), as Kyverno's --mutatingAdmissionPolicyReports; needs the API server to serve admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicies")
	fs.StringVar(&o.exceptionNamespace, "exception-namespace", "", "the one namespace PolicyExceptions are taken from, as Kyverno's --exceptionNamespace (empty or *: every namespace, Kyverno's default); exceptions elsewhere are ignored, with a Warning Event and tally_scan_exceptions_ignored_total")
	fs.BoolVar(&o.rescanEndpoint, "rescan-endpoint", false, "serve POST /rescan, which forces a full rescan (for operators and benchmarks)")
	fs.StringVar(&o.webhook.listen, "webhook-listen", ":9443", "HTTPS address of the admission webhook (/validate); empty disables the admission bridge")
	fs.StringVar(&o.webhook.certDir, "webhook-cert-dir", "", "directory with the webhook's tls.crt and tls.key (and optionally ca.crt), reloaded when they change; empty: tally generates a CA and certificate")
	fs.StringVar(&o.webhook.secret, "webhook-secret", "tally-webhook-tls", "Secret (in --namespace) holding the generated webhook certificate, shared by every replica")
	fs.StringVar(&o.webhook.dnsNames, "webhook-dns-names", "", "comma-separated DNS names of the generated certificate (default tally-webhook.<namespace>.svc,tally-webhook.<namespace>.svc.cluster.local; IP 127.0.0.1 is always included)")
	fs.StringVar(&o.webhook.configuration, "webhook-configuration", "tally", "ValidatingWebhookConfiguration whose webhooks get the CA bundle (skipped while absent)")
	fs.DurationVar(&o.webhook.timeout, "webhook-timeout", 8*time.Second, "time limit of one admission evaluation; past it the request is answered per the policies' failurePolicy")
	fs.StringVar(&o.webhook.clientCA, "webhook-client-ca", "", "PEM file of CAs: the webhook then requires a client certificate signed by one (configure the API server to present one: see README)")
	fs.BoolVar(&o.webhook.recordRecomputed, "webhook-record-background-results", false, "also write to AdmissionReports the admission results of policies with background on, which the background scan recomputes (by default only what a scan cannot recompute is written: results of policies with background off, and of kinds the scanner cannot read)")
	fs.BoolVar(&o.webhook.manageRules, "webhook-rules-from-policies", true, "keep the rules of --webhook-configuration's webhooks to the kinds the admission policies match (CREATE and UPDATE), plus kyverno.io policies; false leaves the rules as deployed")
	return o
}

// check refuses flags that cannot work together, naming them.
func (o *options) check() error {
	var errs []error
	if _, err := report.ParseAPI(o.handover.reportAPI); err != nil {
		errs = append(errs, fmt.Errorf("--report-api: %w", err))
	}
	if errs2 := validation.IsValidLabelValue(o.handover.managedBy); o.handover.managedBy == "" || len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--managed-by %q is not a label value: %s", o.handover.managedBy, strings.Join(errs2, "; ")))
	}
	if o.workers < 1 {
		errs = append(errs, fmt.Errorf("--workers %d: at least one worker evaluates", o.workers))
	}
	if o.interval <= 0 || o.evalTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--background-scan-interval and --evaluation-timeout must be positive"))
	}
	if o.podUID != "" && !o.sharding {
		errs = append(errs, fmt.Errorf("--pod-uid owns the membership Lease of --sharding: set --sharding too"))
	}
	if o.webhook.clientCA != "" && o.webhook.listen == "" {
		errs = append(errs, fmt.Errorf("--webhook-client-ca authenticates the webhook's callers: the webhook is off (--webhook-listen is empty)"))
	}
	if ns := o.exceptionNamespace; ns != "" && ns != "*" && len(validation.IsDNS1123Label(ns)) > 0 {
		errs = append(errs, fmt.Errorf("--exception-namespace %q is not a namespace name (or * for every namespace)", ns))
	}
	return errors.Join(errs...)
}

func run(ctx context.Context, o options) error {
	cfg, err := o.RESTConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), api.AddToScheme(scheme)); err != nil {
		return err
	}
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
	// Result Events go through events.k8s.io/v1, as Kyverno's: each carries
	// an action, an eventTime and the reporting controller. They are written
	// by tally's Writer, not client-go's broadcaster, which would keep each
	// for minutes to count repeats tally never makes (writer.go).
	reg := prometheus.NewRegistry()
	// Result Events wait in a queue of tally's, sent at a pace the
	// client's rate limit allows (queue.go).
	eventQueue := policyevents.NewQueue(o.maxQueuedEvents, o.eventsQPS, reg)
	emitter := func(controller string) *policyevents.Emitter {
		return &policyevents.Emitter{Recorder: eventQueue.Recorder(policyevents.NewWriter(ctx, events.EventsV1(), scheme, controller)), Success: o.successEvents, Omit: o.omitEvents}
	}
	api, err := report.ParseAPI(o.handover.reportAPI)
	if err != nil {
		return fmt.Errorf("--report-api: %w", err)
	}
	handoverListener, err := net.Listen("tcp", o.handover.listen)
	if err != nil {
		return fmt.Errorf("--handover-listen: %w", err)
	}
	hubs := &handover.Switch{}
	// The admission bridge (below, when the webhook is served): it writes
	// the webhook's rules while this replica leads (sharded: owns the
	// cluster-scoped shard), and the scanner marks a policy with admission
	// on Ready once those rules send its requests.
	var bridge *admission.Bridge
	// current is the scanner of this run (sharded: of the current shard).
	var current atomic.Pointer[scan.Scanner]
	// The data policies read: a change rescans the policies that read it.
	o.images.Client, o.images.Namespace = kube, o.Namespace
	loader := data.New(dyn, kube.Discovery().RESTClient(), data.Options{Registry: reg, HTTP: o.http, Images: o.images,
		OnChange: func(policies []string) {
			if s := current.Load(); s != nil {
				s.RescanPolicies(policies)
			}
		},
		OnForbidden: func(policy string, err error) {
			if s := current.Load(); s != nil {
				s.DataForbidden(policy, err)
			}
		}})
	// The scan and the admission bridge compile each policy version once.
	policies := catalog.New()
	// newScanner builds the scanner of a run: of everything, or of a shard
	// (owns); the replica that owns the cluster-scoped shard keeps the
	// policies' status and the scan state.
	newScanner := func(hub *handover.Hub, reg prometheus.Registerer, owns func(string) bool) (*scan.Scanner, error) {
		store, err := memstore.New()
		if err != nil {
			return nil, err
		}
		clusterShard := owns == nil || owns("")
		// Warnings about the policies themselves (rejected, a kind that
		// cannot be served) come from one replica: the one keeping their
		// status. Those about a read refused (a kind's list, a policy's
		// data) from every replica: each reads its own namespaces.
		readEvents := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "tally-scanner"})
		var policyEvents record.EventRecorder
		if clusterShard {
			policyEvents = readEvents
		}
		s := scan.New(dyn, memory.NewMemCacheClient(disc), store, scan.Options{
			Catalog: policies,
			Workers: o.workers, Interval: o.interval, EvalTimeout: o.evalTimeout, StateNamespace: o.Namespace, StateName: o.stateConfigMap,
			Registry: reg, Recorder: policyEvents, ReadEvents: readEvents,
			NoPolicyStatus: !o.policyStatus || !clusterShard,
			Handover:       hub, FinalReports: scan.FinalReports{API: api, ManagedBy: o.handover.managedBy},
			// Result Events are reported as Kyverno's background scans report them.
			Events: emitter(policyevents.ControllerScan),
			Loader: loader,
			Data:   loader,
			Shard:  owns, StateReadOnly: !clusterShard,
			ExceptionNamespace:             o.exceptionNamespace,
			MutatingAdmissionPolicyReports: o.mapReports,
		})
		if o.webhook.listen != "" && o.webhook.manageRules && o.webhook.configuration != "" {
			s.SetWebhookConfigured(func(policy string, generation int64) bool { return bridge.WebhookConfigured(policy, generation) })
		}
		current.Store(s)
		hubs.Set(hub)
		return s, nil
	}
	var daemon interface {
		process.Daemon
		setOnStart(func())
	}
	var leading func() bool
	if o.sharding {
		sd := &shardedDaemon{newScanner: newScanner, current: &current, hubs: hubs, metrics: &process.Switch{},
			opts: shard.Options{Client: kube, Namespace: o.Namespace, Group: o.shardGroup, Identity: o.Identity, Registry: reg,
				Recorder: broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "tally-scanner"})}}
		if o.podUID != "" {
			sd.opts.Owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: o.Identity, UID: types.UID(o.podUID)}
		}
		o.LeaderElect = false // every replica works, on its own shard
		o.Gatherers = append(o.Gatherers, sd.metrics)
		leading = sd.ownsClusterShard
		daemon = sd
	} else {
		s, err := newScanner(handover.New(handover.Options{Registry: reg}), reg, nil)
		if err != nil {
			return err
		}
		ld := &leadingDaemon{Scanner: s}
		leading = ld.leading.Load
		daemon = ld
	}
	rescan := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST to force a full rescan", http.StatusMethodNotAllowed)
			return
		}
		s := current.Load()
		if s == nil {
			http.Error(w, "the scanner has not started yet", http.StatusServiceUnavailable)
			return
		}
		if err := s.RescanAll(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("rescanned")) // the client went away: nothing to tell it
	})
	handlers := process.Handlers{}
	if o.rescanEndpoint {
		handlers["/rescan"] = rescan
	}
	// The webhook's admission results are written by one recorder; the
	// webhook runs on every replica, outside leader election.
	// Past its bound, the recorder hands a resource to a background rescan
	// instead of growing.
	recorder := admission.NewRecorder(dyn, admission.RecorderOptions{Registry: reg, OnOverflow: func(uid string) {
		if s := current.Load(); s != nil {
			s.Rescan(uid)
		}
	}})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var parts []func(context.Context) error
	parts = append(parts, func(ctx context.Context) error { recorder.Run(ctx); return nil }, loader.Run,
		func(ctx context.Context) error { eventQueue.Run(ctx); return nil },
		func(ctx context.Context) error { return hubs.Serve(ctx, handoverListener) })
	if o.webhook.listen != "" {
		var dnsNames []string
		for _, n := range strings.Split(o.webhook.dnsNames, ",") {
			if n = strings.TrimSpace(n); n != "" {
				dnsNames = append(dnsNames, n)
			}
		}
		// What the scan recomputes is left to it (coverage.go).
		var scanned func(context.Context, schema.GroupVersionResource) bool
		if !o.webhook.recordRecomputed {
			scanned = admission.NewCoverage(kube.AuthorizationV1().SelfSubjectAccessReviews(), 0).Scanned
		}
		bridge = admission.New(dyn, kube, memory.NewMemCacheClient(disc), admission.Options{
			Catalog: policies,
			Listen:  o.webhook.listen, CertDir: o.webhook.certDir,
			SecretNamespace: o.Namespace, SecretName: o.webhook.secret, DNSNames: dnsNames,
			WebhookConfiguration: o.webhook.configuration, Timeout: o.webhook.timeout,
			ManageRules: o.webhook.manageRules, Leading: leading, ClientCAFile: o.webhook.clientCA, Recorder: recorder, Registry: reg,
			Loader: loader, Data: loader, Events: emitter(policyevents.ControllerAdmission),
			Scanned: scanned, ExceptionNamespace: o.exceptionNamespace,
		})
		o.ReadyChecks = append(o.ReadyChecks, func() string {
			if !bridge.Serving() {
				return "admission webhook not serving yet"
			}
			return ""
		})
		parts = append(parts, bridge.Run)
		daemon.setOnStart(bridge.Kick)
	}
	done := make(chan error, len(parts))
	for _, run := range parts {
		go func() {
			err := run(ctx)
			cancel() // a part that stops (the webhook cannot listen) stops the process
			done <- err
		}()
	}
	err = process.Run(ctx, o.Options, cfg, reg, daemon, handlers)
	cancel()
	errs := []error{err}
	for range parts {
		errs = append(errs, <-done)
	}
	return errors.Join(errs...)
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

// shardedDaemon runs a scanner on each shard this replica is given among
// the live replicas (shard.Run): a new store, hand-over and metrics for
// each, so that nothing of a shard it lost stays behind.
type shardedDaemon struct {
	opts       shard.Options
	newScanner func(*handover.Hub, prometheus.Registerer, func(string) bool) (*scan.Scanner, error)
	current    *atomic.Pointer[scan.Scanner]
	hubs       *handover.Switch
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
		hub := handover.New(handover.Options{Registry: reg, Shard: handover.Shard{Self: a.Self, Members: a.Members}})
		s, err := d.newScanner(hub, reg, a.Owns)
		if err != nil {
			return err
		}
		d.metrics.Set(reg)
		d.assignment.Store(&a)
		defer func() {
			d.assignment.Store(nil)
			// A hand-over never ready: the merger beside stops at once.
			d.hubs.Set(handover.New(handover.Options{}))
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
	s := d.current.Load()
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

func (d *leadingDaemon) Run(ctx context.Context) error {
	d.leading.Store(true)
	defer d.leading.Store(false)
	if d.onStart != nil {
		d.onStart()
	}
	return d.Scanner.Run(ctx)
}
