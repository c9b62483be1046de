package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/engine/cel"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
)

// Options configure a Bridge.
type Options struct {
	// Catalog compiles the policies, shared with the scanner so that each
	// version is compiled once (nil: compiled here, unshared).
	Catalog *catalog.Catalog
	// Listen is the HTTPS address of /validate (":9443"; "127.0.0.1:0" picks a port).
	Listen string
	// CertDir holds a supplied tls.crt/tls.key (and optionally ca.crt); empty:
	// tally generates a CA and serving certificate in the Secret below.
	CertDir string
	// SecretNamespace/SecretName locate the generated certificate's Secret.
	SecretNamespace, SecretName string
	// DNSNames are the serving certificate's DNS SANs (IP 127.0.0.1 is always added).
	DNSNames []string
	// WebhookConfiguration names the ValidatingWebhookConfiguration whose
	// webhooks get the CA bundle ("" leaves webhook configurations alone).
	WebhookConfiguration string
	// ClientCAFile, when set, makes the webhook require a client certificate
	// signed by one of its CAs: only an API server configured to present one
	// (AdmissionConfiguration kubeConfigFile) can then send reviews.
	ClientCAFile string
	// ManageRules keeps the rules of that configuration's webhooks to what
	// the admission policies match (rules.go).
	ManageRules bool
	// Leading, when set, says whether this replica leads (tally-scanner's
	// Lease): only the leader writes the rules, so that replicas whose views
	// of the policies differ for a moment do not undo each other's writes.
	// Nil: this bridge always writes them (one replica).
	Leading func() bool
	// Timeout bounds one request's evaluation (default 8s).
	Timeout time.Duration
	// MaxRequestBytes bounds an AdmissionReview body (default 3 MiB).
	MaxRequestBytes int64
	// Recorder writes the admission results. nil: the bridge makes its own
	// (with FlushInterval and WriteWorkers) and runs it; otherwise whoever
	// made it runs it.
	Recorder *Recorder
	// Sink, when set, receives the results of each recorded request instead
	// of the Recorder (a stand-in for another admission controller writes
	// its own kind of report with it).
	Sink func(Admitted)
	// Scanned, when set, tells whether the background scan reads a kind:
	// the results of its policies with background on are then left to the
	// scan, not written to an AdmissionReport (coverage.go). Nil writes
	// every result. The Sink always gets every result.
	Scanned func(context.Context, schema.GroupVersionResource) bool
	// OnPolicy, when set, is told of every policy version the webhook loads
	// (rejected nil) or refuses (rejected says why).
	OnPolicy func(gvr schema.GroupVersionResource, policy *unstructured.Unstructured, rejected error)
	// FlushInterval is how often aggregated results are written (default 500ms).
	FlushInterval time.Duration
	// WriteWorkers write reports in parallel during a flush (default 4).
	WriteWorkers int
	// Loader resolves context entries that read the cluster (nil: none).
	Loader engine.ContextLoader
	// Data serves the cluster reads of CEL policies (nil: none).
	Data cel.ClusterData
	// Images verifies the images of verifyImages rules (nil: skipped).
	Images engine.ImageVerifier
	// Events, when set, records Kyverno's result Events of the requests it
	// answers (violations, blocked requests, and with success events
	// PolicyApplied); its recorder reports as policyevents.ControllerAdmission.
	Events *policyevents.Emitter
	// CAValidity and CertValidity of generated certificates (defaults 3y, 1y);
	// CertCheckInterval is how often they are checked (default 1m).
	CAValidity, CertValidity, CertCheckInterval time.Duration
	Registry                                    prometheus.Registerer
	Clock                                       clock.WithTicker
	// Exceptions says which PolicyExceptions apply, and where (R47).
	Exceptions engine.ExceptionScope
}

// DefaultMaxRequestBytes bounds an AdmissionReview body: the API server's
// own limit on objects is 3 MiB.
const DefaultMaxRequestBytes = 3 << 20

// DefaultDNSNames are the serving certificate's names for a namespace.
func DefaultDNSNames(namespace string) []string {
	return []string{"tally-webhook." + namespace + ".svc", "tally-webhook." + namespace + ".svc.cluster.local"}
}

type certSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	reconcile(ctx context.Context) error
	ready() bool
	bundle() []byte
}

// Bridge is the admission webhook: it serves /validate, keeps its own view
// of the policies, records results and manages its certificate.
type Bridge struct {
	pool *evalPool
	// decoding bounds the reviews read and decoded at once to what the pool
	// can evaluate (handler.go).
	decoding chan struct{}
	opts     Options
	client   dynamic.Interface
	kube     kubernetes.Interface
	disc     discovery.DiscoveryInterface
	clock    clock.WithTicker
	metrics  *metrics
	policies *policySet
	recorder *Recorder
	// runRecorder: the bridge made its recorder and runs it.
	runRecorder bool
	certs       certSource

	mu   sync.Mutex
	addr string
	kick chan struct{}
	// configured holds, after each pass that left the webhook
	// configuration's rules as the policies want them, the generation of
	// each policy they were computed from (by report name).
	configured atomic.Pointer[configuredRules]
}

// configuredRules are the policies a webhook configuration's rules were
// computed from, and when the API server can be taken to apply them.
type configuredRules struct {
	generations map[string]int64
	from        time.Time
}

// rulesSettle is how long after writing the rules a policy they add counts
// as configured: the API server applies a webhook configuration change from
// its own watch, a moment after the write.
const rulesSettle = 2 * time.Second

// New builds a Bridge; it starts nothing (Run does).
func New(client dynamic.Interface, kube kubernetes.Interface, disc discovery.DiscoveryInterface, opts Options) *Bridge {
	if opts.Timeout <= 0 {
		opts.Timeout = 8 * time.Second
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.CAValidity <= 0 {
		opts.CAValidity = 3 * 365 * 24 * time.Hour
	}
	if opts.CertValidity <= 0 {
		opts.CertValidity = 365 * 24 * time.Hour
	}
	if opts.CertCheckInterval <= 0 {
		opts.CertCheckInterval = time.Minute
	}
	if len(opts.DNSNames) == 0 {
		opts.DNSNames = DefaultDNSNames(opts.SecretNamespace)
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	b := &Bridge{pool: newEvalPool(poolWorkers, poolOverflow), opts: opts, client: client, kube: kube, disc: disc, clock: opts.Clock, kick: make(chan struct{}, 1),
		decoding: make(chan struct{}, poolWorkers+poolOverflow)}
	b.recorder = opts.Recorder
	if b.recorder == nil {
		b.recorder = NewRecorder(client, RecorderOptions{FlushInterval: opts.FlushInterval, Workers: opts.WriteWorkers, Registry: opts.Registry, Clock: opts.Clock})
		b.runRecorder = true
	}
	b.metrics = newMetrics(opts.Registry)
	b.policies = newPolicySet(b.metrics.policyErrors.Inc)
	b.policies.exceptionScope = opts.Exceptions
	b.policies.catalog = opts.Catalog
	b.policies.onPolicy = opts.OnPolicy
	b.policies.onChange = func() {
		select { // the webhook rules follow the policies
		case b.kick <- struct{}{}:
		default:
		}
	}
	if opts.CertDir != "" {
		b.certs = &dirCerts{dir: opts.CertDir}
	} else {
		b.certs = &secretCerts{kube: kube, namespace: opts.SecretNamespace, secretName: opts.SecretName, clock: opts.Clock,
			opts: certOptions{dnsNames: opts.DNSNames, caValidity: opts.CAValidity, certValidity: opts.CertValidity}}
	}
	return b
}

// Kick asks for a pass of certificate and rules maintenance now (for
// instance when this replica starts leading).
func (b *Bridge) Kick() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// WebhookConfigured reports whether the webhook configuration sends tally
// the requests of the policy (by report name) at this generation or a later
// one: its rules were written, by this replica, from a view of the policies
// that held it. With rules left as deployed (ManageRules false) it is
// always true.
func (b *Bridge) WebhookConfigured(policy string, generation int64) bool {
	if !b.opts.ManageRules || b.opts.WebhookConfiguration == "" {
		return true
	}
	c := b.configured.Load()
	if c == nil || b.clock.Now().Before(c.from) {
		return false
	}
	g, ok := c.generations[policy]
	return ok && g >= generation
}

// Addr is the address the webhook listens on, once it does ("" before).
func (b *Bridge) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// Synced reports whether the policies were listed and a certificate is served.
func (b *Bridge) Synced() bool { return b.policies.synced() && b.certs.ready() }

// Run watches, manages the certificate, serves /validate once the policies
// were listed and a certificate is ready, and flushes reports, until ctx
// ends. It fails only when the listener cannot be opened.
// Serving reports whether the webhook accepts requests (always true when
// the bridge is disabled): a replica is ready for webhook traffic only then.
func (b *Bridge) Serving() bool {
	if b.opts.Listen == "" {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr != ""
}

// classicPolicyKinds are the kinds of classic policies and what they
// read at admission; classicKindsWait is how long Run waits for them before
// it serves without those not served yet.
var classicPolicyKinds = append([]schema.GroupVersionResource{apiresources.Namespace, apiresources.PolicyException}, catalog.GVRs(nil, catalog.Classic)...)

// admitted says whether the bridge evaluates a kind's policies.
func admitted(k *catalog.Kind) bool { return k.Admission }

const classicKindsWait = time.Minute

func (b *Bridge) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("admission")
	ctx = logr.NewContext(ctx, log)

	var (
		sourcesMu sync.Mutex
		sources   []*watch.Source
		stopped   bool // Run is returning: no watch is started any more
	)
	classicMissing := 0 // classic kinds not watched yet
	startSource := func(gvr schema.GroupVersionResource) {
		sourcesMu.Lock()
		defer sourcesMu.Unlock()
		if slices.Contains(classicPolicyKinds, gvr) {
			classicMissing--
		}
		if !stopped {
			b.policies.expect(gvr)
			sources = append(sources, watch.Start(ctx, b.client, gvr, b.policies))
		}
	}
	// The policy kinds (ValidatingPolicies and ImageValidatingPolicies
	// where served: tally's CRDs, or Kyverno's). Installed with tally (its
	// chart or overlay) or Kyverno, a kind's CRD may be established after
	// the scanner starts: the kinds not served yet are followed, and
	// watched once served (watch.FollowServed).
	kinds := append(slices.Clone(classicPolicyKinds), catalog.GVRs(admitted, catalog.CEL)...)
	classicMissing = len(classicPolicyKinds)
	watched := watch.ServedNow(ctx, b.disc, b.clock, kinds...)
	if len(watched) < len(kinds) {
		log.Info("some policy kinds are not served yet; admission evaluates without them until they are", "served", fmt.Sprint(watched))
	}
	for _, gvr := range watched {
		startSource(gvr)
	}
	if b.opts.WebhookConfiguration != "" {
		sources = append(sources, watch.Start(ctx, b.client, apiresources.ValidatingWebhookConfiguration, &configWatch{name: b.opts.WebhookConfiguration, kick: b.kick}))
	}
	var wg sync.WaitGroup
	defer func() {
		sourcesMu.Lock()
		stopped = true
		sourcesMu.Unlock()
		for _, s := range sources {
			s.Cancel()
		}
		for _, s := range sources {
			<-s.Done()
		}
		wg.Wait()
		b.pool.stop() // the server is shut down: no request is left to evaluate
	}()
	if b.runRecorder {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.recorder.Run(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.maintainCerts(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		watch.FollowServed(ctx, b.disc, b.clock, slices.DeleteFunc(slices.Clone(kinds), func(g schema.GroupVersionResource) bool { return slices.Contains(watched, g) }), startSource)
	}()

	// Serve once the answers can be right: before that the connection is
	// refused and the API server applies the webhook's failurePolicy. The
	// classic policy kinds are waited for (classicKindsWait at most: a fresh
	// install establishes them moments after the scanner starts).
	started := b.clock.Now()
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		sourcesMu.Lock()
		classic := classicMissing == 0 || b.clock.Since(started) > classicKindsWait
		sourcesMu.Unlock()
		return classic && b.Synced(), nil
	}); err != nil {
		return nil // ctx ended
	}
	tlsConfig, err := b.tlsConfig()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", b.opts.Listen)
	if err != nil {
		return fmt.Errorf("admission webhook: listen on %s: %w", b.opts.Listen, err)
	}
	b.mu.Lock()
	b.addr = ln.Addr().String()
	b.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("/validate", b)
	// At most maxConnections connections at once (the API server sends
	// its reviews over a few, HTTP/2): a flood of others waits in the
	// listen backlog instead of holding memory here.
	ln = netutil.LimitListener(ln, maxConnections)
	srv := &http.Server{
		Handler: mux,
		// Requests carry Run's logger; a shutdown lets them finish.
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       b.opts.Timeout + 5*time.Second,
		WriteTimeout:      b.opts.Timeout + 5*time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	log.Info("admission webhook serving", "address", b.addr, "path", "/validate")
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admission webhook: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown) // best effort: the process is stopping
	return nil
}

// tlsConfig is the webhook's TLS: TLS 1.2 or later, the served certificate,
// and with ClientCAFile client certificates required and verified.
func (b *Bridge) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: b.certs.GetCertificate}
	if b.opts.ClientCAFile == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(b.opts.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("admission webhook: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("admission webhook: client CA %s holds no PEM certificate", b.opts.ClientCAFile)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return cfg, nil
}

// maintainCerts keeps the certificate served, renewed and set on the
// webhook configuration: at start (retrying with backoff), every
// CertCheckInterval, and whenever the webhook configuration changes.
func (b *Bridge) maintainCerts(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	initial := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
	backoff := initial
	t := b.clock.NewTicker(b.opts.CertCheckInterval)
	defer t.Stop()
	for {
		err := b.certs.reconcile(ctx)
		if err == nil {
			err = b.ensureCABundle(ctx)
		}
		next := b.opts.CertCheckInterval
		if err != nil {
			log.Error(err, "webhook certificate maintenance failed; retrying")
			next = backoff.Step()
			if sc, ok := b.certs.(*secretCerts); ok && !sc.ready() {
				// The Secret cannot be written (no namespace, no RBAC): serve a
				// certificate kept in memory meanwhile, so that the webhook
				// works; the Secret's replaces it once it can be written.
				if err := sc.serveEphemeral(); err != nil {
					log.Error(err, "generating an in-memory webhook certificate failed")
				} else {
					log.Info("serving an in-memory webhook certificate until the Secret can be written", "secret", sc.namespace+"/"+sc.secretName)
					_ = b.ensureCABundle(ctx) // best effort; retried with the next pass
				}
			}
		} else {
			backoff = initial
		}
		retryAt := b.clock.After(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-b.kick:
		case <-retryAt:
		}
	}
}

// ensureCABundle sets the CA bundle on every webhook of the webhook
// configuration, and with ManageRules their rules; a configuration that does
// not exist (yet) is skipped.
func (b *Bridge) ensureCABundle(ctx context.Context) error {
	bundle := b.certs.bundle()
	if b.opts.WebhookConfiguration == "" || len(bundle) == 0 {
		return nil
	}
	var rules []admissionregistrationv1.RuleWithOperations
	var from *snapshot // the policies the rules are computed from
	if b.opts.ManageRules && b.policies.synced() && (b.opts.Leading == nil || b.opts.Leading()) {
		from = b.policies.current()
		var err error
		if rules, err = desiredRules(from.policies, b.disc); err != nil {
			return err
		}
	}
	api := b.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vwc, err := api.Get(ctx, b.opts.WebhookConfiguration, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // not created yet: its creation kicks another pass
		}
		if err != nil {
			return fmt.Errorf("get ValidatingWebhookConfiguration %s: %w", b.opts.WebhookConfiguration, err)
		}
		changed := false
		for i := range vwc.Webhooks {
			if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, bundle) {
				vwc.Webhooks[i].ClientConfig.CABundle = bundle
				changed = true
			}
			if rules != nil && !equality.Semantic.DeepEqual(vwc.Webhooks[i].Rules, rules) {
				vwc.Webhooks[i].Rules = rules
				changed = true
			}
		}
		now := b.clock.Now()
		if changed {
			if _, err := api.Update(ctx, vwc, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
				return err
			}
			logr.FromContextOrDiscard(ctx).Info("updated the webhook configuration (CA bundle, rules)", "name", vwc.Name, "webhooks", len(vwc.Webhooks), "rules", len(rules))
			now = now.Add(rulesSettle)
		}
		if from != nil && len(vwc.Webhooks) > 0 {
			c := &configuredRules{generations: make(map[string]int64, len(from.policies)), from: now}
			for _, ap := range from.policies {
				c.generations[ap.name] = ap.generation
			}
			if prev := b.configured.Load(); !changed && prev != nil && prev.from.After(now) {
				c.from = prev.from // the last write has not settled yet
			}
			b.configured.Store(c)
		}
		return nil
	})
}

// desiredRules are the webhook rules of the policies. A kind that
// discovery does not know is looked for once more in fresh discovery (a CRD
// may have just been installed).
func desiredRules(policies []*admissionPolicy, disc discovery.DiscoveryInterface) ([]admissionregistrationv1.RuleWithOperations, error) {
	kinds := kindsOf(policies)
	rules, missing, err := webhookRules(kinds, disc)
	if err != nil {
		return nil, err
	}
	if c, ok := disc.(discovery.CachedDiscoveryInterface); ok && len(missing) > 0 {
		c.Invalidate()
		rules, _, err = webhookRules(kinds, disc)
	}
	return append(rules, celRules(policies)...), err
}

// configWatch kicks certificate maintenance when the webhook configuration
// is created or changed.
type configWatch struct {
	name string
	kick chan struct{}
}

func (c *configWatch) signal(u *unstructured.Unstructured) {
	if u.GetName() != c.name {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *configWatch) Upsert(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	c.signal(u)
}
func (c *configWatch) Remove(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) {
}
func (c *configWatch) Replace(_ context.Context, _ schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	for _, u := range objs {
		c.signal(u)
	}
}
func (c *configWatch) Listed(context.Context, schema.GroupVersionResource) {}
