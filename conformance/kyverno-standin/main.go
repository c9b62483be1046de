// Command kyverno-standin stands in for Kyverno v1.19's admission controller
// in the conformance suite's beside-Kyverno configuration, where tally runs
// as config/overlays/beside-kyverno runs it (no webhook of its own, ingestion
// of Kyverno's reports on). It is a test fixture, not part of tally.
//
// It evaluates the policies with tally's engine behind a validating webhook
// registered on the API server, denies as Kyverno does, and for every
// admitted, recorded request writes an EphemeralReport per Kyverno handler
// that has results (ClusterEphemeralReport for a cluster-scoped resource),
// each when Kyverno writes it (below), in exactly the shape Kyverno 1.19 writes
// (../shared/kyverno-1.19/ephemeralreport-admission.yaml): generateName from
// the request UID, an empty spec.owner and no ownerReferences, the resource
// named only by audit.kyverno.io labels and annotations, and
// properties.process derived from the policy's background setting. Like
// Kyverno, it keeps the policies' Ready condition. Its webhook answers the
// policy writes Kyverno's policy webhook refuses in its own words, or where
// tally's webhook stores the policy, as Kyverno does (policywebhook.go).
//
// # When each report is written, beside Kyverno 1.19's order
//
// A test double that writes at other times than Kyverno hides races (issue
// 38: the stand-in wrote every report after answering, so the suite passed
// while, beside the real Kyverno, the merger took the ValidatingPolicy
// reports, written before their resources were stored, for reports of
// resources gone). Kyverno 1.19's order, read in its source (webhook
// handlers and background controller), and the stand-in's:
//
//	handler (Kyverno 1.19)          Kyverno writes its EphemeralReport       the stand-in
//	classic validate, Enforce       a goroutine not waited for (races the    the same: a goroutine
//	                                persist); none when denied               started before the answer
//	classic validate, Audit         a worker pool job, submitted after the   a goroutine (its own report),
//	                                Enforce check; none when denied          none when denied
//	ValidatingPolicy (and the       before the answer: the handler waits     before the answer: created
//	namespaced kind)                for its report; none when a Deny policy  in the Sink, which the
//	                                matched (see below)                      bridge calls before answering
//	ImageValidatingPolicy           before the answer (waits), a report      before the answer, with the
//	                                of its own                               ValidatingPolicies' (tally's
//	                                                                         engine and verifier: cosign)
//	ValidatingAdmissionPolicy       none (the API server evaluates VAPs;     none
//	                                reported in the background only)
//	classic mutate                  a goroutine not waited for               a goroutine, its own report:
//	                                                                         pass "mutated Kind/name in
//	                                                                         namespace NS" per rule whose
//	                                                                         match selects the object
//	                                                                         (requests with validate
//	                                                                         results only; nothing mutated;
//	                                                                         on a CREATE no resource UID,
//	                                                                         as Kyverno's: adopted by name)
//	verifyImages                    a goroutine not waited for               with classic mutate: the rule's
//	                                                                         result, its images verified
//	                                                                         (tally's engine and verifier:
//	                                                                         cosign), Kyverno's messages
//	MutatingPolicy                  a goroutine not waited for               not written
//	background controller:          after the fact, when its UpdateRequest   generate: a second after the
//	generate, mutateExisting        is processed: on the trigger, source     request, on the trigger, as
//	                                background-scan, owned by it             Kyverno's (nothing generated);
//	                                                                         mutateExisting: in the same
//	                                                                         report, one result per target
//	                                                                         with patched-target
//
// So one request may give up to four reports (ValidatingPolicy, classic
// Enforce, classic Audit, classic mutate), each with the policy labels of its own results;
// the merger folds them. order_test.go checks the order; the conformance
// case R10-admission-burst-background-off creates 24 resources back to
// back under background-off policies and requires every report.
//
// Like Kyverno 1.19 (measured beside it, issue 25), it reports no
// ValidatingPolicy result of an admitted request that a ValidatingPolicy
// with the Deny action matched, even one that passed: the results of the
// Warn and Audit ValidatingPolicies on that request are never reported.
// Results of classic policies, which Kyverno evaluates in a webhook handler
// of their own, are written as usual (not measured: Kyverno's run had
// ValidatingPolicies alone on such requests).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/textlogger"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	reportsv1 "github.com/tally-dev/tally/api/reports/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/scan"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/imageverify/sigverify"
	"github.com/tally-dev/tally/report"
)

func main() {
	var (
		kubeconfig, listen, webhookListen, webhookConfiguration, namespace string
	)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (Kyverno's own rights)")
	flag.StringVar(&listen, "listen", "127.0.0.1:0", "HTTP address of /healthz")
	flag.StringVar(&webhookListen, "webhook-listen", "127.0.0.1:0", "HTTPS address of the validating webhook (/validate)")
	flag.StringVar(&webhookConfiguration, "webhook-configuration", "kyverno-resource-validating-webhook-cfg", "ValidatingWebhookConfiguration whose caBundle is kept")
	flag.StringVar(&namespace, "namespace", "kyverno", "namespace of the webhook certificate's Secret")
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(1)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(logr.NewContext(ctx, log), kubeconfig, listen, webhookListen, webhookConfiguration, namespace); err != nil {
		log.Error(err, "kyverno-standin failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, listen, webhookListen, webhookConfiguration, namespace string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
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
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	reg := prometheus.NewRegistry()
	s := &standin{client: dyn, background: map[string]bool{}, deny: map[string]bool{}, enforce: map[string]bool{}, controlled: map[string]controllerPolicy{},
		generating: map[string]matchedPolicy{}, ctx: ctx,
		images: sigverify.New(sigverify.Options{}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kyverno_standin_reports_created_total", Help: "EphemeralReports and ClusterEphemeralReports written, by kind.",
		}, []string{"kind"})}
	s.withheld = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kyverno_standin_reports_withheld_total", Help: "Admitted requests whose ValidatingPolicy results were not reported because a denying ValidatingPolicy matched them, as Kyverno 1.19 does.",
	})
	reg.MustRegister(s.created, s.withheld)
	const secretName = "kyverno-svc.kyverno.svc.kyverno-tls-pair"
	// Kyverno's admission controller records result Events (violations on
	// the policy and the object, blocked requests on the policy).
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	events := kevents.NewBroadcaster(&kevents.EventSinkImpl{Interface: kube.EventsV1()})
	if err := events.StartRecordingToSinkWithContext(ctx); err != nil {
		return err
	}
	defer events.Shutdown()
	bridge := admission.New(dyn, kube, memory.NewMemCacheClient(disc), admission.Options{
		// The bridge's own listener goes unused: the stand-in serves the
		// webhook, Kyverno's policy checks first (policywebhook.go).
		Listen: "127.0.0.1:0", SecretNamespace: namespace, SecretName: secretName,
		WebhookConfiguration: webhookConfiguration, Registry: prometheus.NewRegistry(),
		Sink: s.write, OnPolicy: s.policyLoaded,
		// Its webhook verifies the images of ImageValidatingPolicies.
		Images: s.images,
		Events: &policyevents.Emitter{Recorder: events.NewRecorder(scheme, policyevents.ControllerAdmission)},
	})
	webhook := &webhookServer{addr: webhookListen, handler: policyWebhook{next: bridge}, ready: bridge.Serving,
		certs: &secretCert{kube: kube, namespace: namespace, name: secretName}}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !bridge.Serving() || !webhook.up.Load() {
			http.Error(w, "webhook not serving yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok")) // the prober went away: nothing to tell it
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	// Kyverno also keeps the status of its CEL policies: ready, or not with
	// the compiler's message (one its webhook did not see).
	for _, gvr := range []schema.GroupVersionResource{gvrValidatingPolicy, gvrNamespacedValidatingPolicy, gvrMutatingPolicy, gvrNamespacedMutatingPolicy,
		gvrImageValidatingPolicy, gvrNamespacedImageValidatingPolicy} {
		if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
			src := watch.Start(ctx, dyn, gvr, celStatus{s})
			defer src.Stop()
		}
	}
	// Kyverno's background controller reports GeneratingPolicies.
	for gvr, into := range map[schema.GroupVersionResource]func(*standin) map[string]matchedPolicy{
		gvrGeneratingPolicy: func(s *standin) map[string]matchedPolicy { return s.generating },
	} {
		if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
			src := watch.Start(ctx, dyn, gvr, matchedWatch{s: s, into: into})
			defer src.Stop()
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- bridge.Run(ctx) }()
	go func() { errc <- webhook.run(ctx) }()
	err = <-errc // the first to end ends the other
	cancel()
	return errors.Join(err, <-errc)
}

var (
	gvrValidatingPolicy                = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "validatingpolicies"}
	gvrNamespacedValidatingPolicy      = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "namespacedvalidatingpolicies"}
	gvrMutatingPolicy                  = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "mutatingpolicies"}
	gvrNamespacedMutatingPolicy        = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "namespacedmutatingpolicies"}
	gvrGeneratingPolicy                = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "generatingpolicies"}
	gvrImageValidatingPolicy           = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "imagevalidatingpolicies"}
	gvrNamespacedImageValidatingPolicy = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "namespacedimagevalidatingpolicies"}
)

// celStatus keeps the status of CEL policies as Kyverno's admission
// controller does (status.conditionStatus): ready with WebhookConfigured and
// RBACPermissionsGranted, or not with the reason.
type celStatus struct{ s *standin }

func (c celStatus) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	// A policy whose expressions do not compile is not ready, with the
	// compiler's message.
	var compiled *engine.Policy
	var rejected error
	admission := false
	if gvr == gvrMutatingPolicy || gvr == gvrNamespacedMutatingPolicy {
		// Kyverno's mutating webhook applies it at admission.
		var mp *policiesv1.MutatingPolicy
		if mp, rejected = policiesv1.MutatingFromObject(u.Object); rejected == nil {
			compiled, rejected = engine.CompileMutatingPolicy(mp)
			admission = mp.Spec.Evaluation == nil || mp.Spec.Evaluation.Admission.On()
		}
	} else if gvr == gvrImageValidatingPolicy || gvr == gvrNamespacedImageValidatingPolicy {
		var ip *policiesv1.ImageValidatingPolicy
		if ip, rejected = policiesv1.ImageValidatingFromObject(u.Object); rejected == nil {
			compiled, rejected = engine.CompileImageValidatingPolicy(ip)
			admission = rejected == nil && compiled.AdmissionEnabled()
		}
	} else {
		var vp *policiesv1.ValidatingPolicy
		if vp, rejected = policiesv1.FromObject(u.Object); rejected == nil {
			compiled, rejected = engine.CompileValidatingPolicy(vp)
			admission = rejected == nil && compiled.AdmissionEnabled()
		}
	}
	// A policy that loaded gets Kyverno's further conditions: the webhook
	// configured for it (admission on) and the reports controller's rights
	// (Kyverno's has them all).
	var more []scan.Condition
	if rejected == nil {
		more = scan.CELConditions(admission, nil)
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.s.ctx, 30*time.Second)
		defer cancel()
		if err := scan.WriteReady(ctx, c.s.client, gvr, u, time.Now(), rejected, "Ready", "kyverno", more...); err != nil && ctx.Err() == nil {
			logr.FromContextOrDiscard(ctx).Error(err, "CEL policy status", "policy", u.GetNamespace()+"/"+u.GetName())
		}
	}()
}
func (celStatus) Remove(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) {}
func (celStatus) Replace(context.Context, schema.GroupVersionResource, []*unstructured.Unstructured) {
}
func (celStatus) Listed(context.Context, schema.GroupVersionResource) {}

// standin writes the reports and policy status Kyverno's admission
// controller would.
type standin struct {
	client  dynamic.Interface
	ctx     context.Context
	created *prometheus.CounterVec
	// withheld counts the requests whose ValidatingPolicy results deniedBy
	// kept out.
	withheld prometheus.Counter

	mu         sync.Mutex
	background map[string]bool // spec.background by report name
	// deny holds the report names of the ValidatingPolicies and
	// NamespacedValidatingPolicies whose validationActions include Deny.
	deny map[string]bool
	// enforce holds the report names of the classic policies Kyverno's
	// policy cache files as Enforce (a rule or the policy failing with
	// Enforce): their results go in the Enforce handler's report.
	enforce map[string]bool
	// controlled are the classic policies with admission on and mutate or
	// generate rules, by report name, and their resourceVersions (for the
	// policy labels of the reports of Kyverno's mutating webhook and
	// background controller).
	controlled map[string]controllerPolicy
	// generating are the GeneratingPolicies (Kyverno's background
	// controller reports them on their triggers), by name.
	generating map[string]matchedPolicy
	// images verifies the images of verifyImages rules, as Kyverno's
	// mutating webhook does (with tally's verifier: the registry and
	// cosign work are Kyverno's own libraries either way).
	images engine.ImageVerifier
}

// matchedPolicy is a CEL policy kind tally does not evaluate, as the
// stand-in reads it: what selects its resources (its constraints and
// match conditions, compiled as a ValidatingPolicy that always passes)
// and its resourceVersion.
type matchedPolicy struct {
	selects         *engine.Policy
	background      bool // spec.evaluation.background.enabled
	resourceVersion string
}

// applies says whether the policy selects an admitted object.
func (p matchedPolicy) applies(ctx context.Context, obj map[string]any) bool {
	for _, r := range p.selects.Evaluate(ctx, &engine.Request{Object: obj}) {
		if !r.ConditionsNotMet {
			return true
		}
	}
	return false
}

// matchedWatch keeps the stand-in's policies of one such kind.
type matchedWatch struct {
	s    *standin
	into func(*standin) map[string]matchedPolicy
}

func (w matchedWatch) Upsert(ctx context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	vp, err := policiesv1.FromObject(map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": map[string]any{"name": u.GetName()},
		"spec": map[string]any{
			"matchConstraints": spec["matchConstraints"], "matchConditions": spec["matchConditions"], "variables": spec["variables"],
			"validations": []any{map[string]any{"expression": "true"}},
		},
	})
	var selects *engine.Policy
	if err == nil {
		selects, err = engine.CompileValidatingPolicy(vp)
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "policy not understood by the stand-in", "kind", u.GetKind(), "policy", u.GetName())
		delete(w.into(w.s), u.GetName())
		return
	}
	background, found, _ := unstructured.NestedBool(u.Object, "spec", "evaluation", "background", "enabled")
	w.into(w.s)[u.GetName()] = matchedPolicy{selects: selects, background: background || !found, resourceVersion: u.GetResourceVersion()}
}
func (w matchedWatch) Remove(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	delete(w.into(w.s), u.GetName())
}
func (w matchedWatch) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	w.s.mu.Lock()
	clear(w.into(w.s))
	w.s.mu.Unlock()
	for _, u := range objs {
		w.Upsert(ctx, gvr, u)
	}
}
func (matchedWatch) Listed(context.Context, schema.GroupVersionResource) {}

// controllerPolicy is a classic policy with mutate or generate rules.
type controllerPolicy struct {
	compiled        *engine.Policy
	resourceVersion string
}

var (
	gvrPolicy        = schema.GroupVersionResource{Group: "kyverno.io", Version: "v1", Resource: "policies"}
	gvrClusterPolicy = schema.GroupVersionResource{Group: "kyverno.io", Version: "v1", Resource: "clusterpolicies"}
)

// enforces says whether a classic policy fails with Enforce: its
// spec.validationFailureAction or a rule's validate.failureAction.
func enforces(u *unstructured.Unstructured) bool {
	if a, _, _ := unstructured.NestedString(u.Object, "spec", "validationFailureAction"); kyvernov1.ValidationFailureAction(a).Enforce() {
		return true
	}
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		if a, _, _ := unstructured.NestedString(rule, "validate", "failureAction"); kyvernov1.ValidationFailureAction(a).Enforce() {
			return true
		}
	}
	return false
}

// policyLoaded keeps the Ready condition, as Kyverno does, and remembers
// the policy's background setting for properties.process and, for a CEL
// policy, whether it denies.
func (s *standin) policyLoaded(gvr schema.GroupVersionResource, u *unstructured.Unstructured, rejected error) {
	s.remember(gvr, u)
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		defer cancel()
		if err := scan.WriteReady(ctx, s.client, gvr, u, time.Now(), rejected, "Ready", "kyverno"); err != nil && ctx.Err() == nil {
			logr.FromContextOrDiscard(ctx).Error(err, "policy status", "policy", u.GetNamespace()+"/"+u.GetName())
		}
	}()
}

// remember keeps what write needs to know of a policy.
func (s *standin) remember(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	name := u.GetName()
	if gvr == gvrPolicy {
		name = u.GetNamespace() + "/" + name
	}
	background, found, _ := unstructured.NestedBool(u.Object, "spec", "background")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.background[name] = background || !found
	switch gvr {
	case gvrPolicy, gvrClusterPolicy:
		s.enforce[name] = enforces(u)
		delete(s.controlled, name)
		admission, found, _ := unstructured.NestedBool(u.Object, "spec", "admission")
		if p, err := catalog.Read(gvr, u); err == nil && (admission || !found) && slices.ContainsFunc(p.Compiled.ControllerRules(), func(r engine.LeftOutRule) bool {
			return r.Type == "mutate" || r.Type == "generate" || r.Type == "verifyImages"
		}) {
			s.controlled[name] = controllerPolicy{compiled: p.Compiled, resourceVersion: u.GetResourceVersion()}
		}
	case gvrValidatingPolicy, gvrNamespacedValidatingPolicy, gvrImageValidatingPolicy, gvrNamespacedImageValidatingPolicy:
		resultName := u.GetName() // as its results name it
		if gvr == gvrNamespacedValidatingPolicy || gvr == gvrNamespacedImageValidatingPolicy {
			resultName = u.GetNamespace() + "/" + resultName
		}
		if gvr == gvrImageValidatingPolicy || gvr == gvrNamespacedImageValidatingPolicy {
			// A CEL policy's background is spec.evaluation.background.enabled.
			bg, found, _ := unstructured.NestedBool(u.Object, "spec", "evaluation", "background", "enabled")
			s.background[resultName] = bg || !found
		}
		actions, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "validationActions")
		s.deny[resultName] = slices.Contains(actions, "Deny")
	}
}

// Kyverno 1.19 writes the EphemeralReports of a request from one handler
// each, each at its own time (measured in Kyverno's source, issue 38; the
// comparison is in the package doc):
//   - ValidatingPolicy (and ImageValidatingPolicy): created before the
//     handler answers the API server, which
//     waits for the create, so the report exists before the resource is
//     stored;
//   - classic policies: one report of the Enforce policies' results, created
//     by a goroutine the handler does not wait for, and one of the Audit
//     policies', created in a worker pool after the answer: they race the
//     persist;
//   - ValidatingAdmissionPolicy: none (the API server evaluates them; only
//     Kyverno's reports controller reports them, in the background).
//
// The stand-in writes the same reports at the same points: write is
// called before the answer is sent (controllers/admission's Sink).
type reportGroup int

const (
	groupCEL     reportGroup = iota // ValidatingPolicy: before the answer
	groupEnforce                    // classic, Enforce: a goroutine not waited for
	groupAudit                      // classic, Audit: after the answer
	groupMutate                     // classic mutate: a goroutine not waited for
	groupCount
)

// creationTimeout bounds one report's create, as Kyverno's report writer
// bounds its own (10 s).
const creationTimeout = 10 * time.Second

// write creates the request's EphemeralReports as Kyverno 1.19 does:
// without the ValidatingPolicy results when a denying ValidatingPolicy gave
// one (see deniedBy), one per handler that has results, each when Kyverno
// creates it.
func (s *standin) write(a admission.Admitted) {
	s.mu.Lock()
	kept, policyLabels, withheld := s.reported(a)
	if withheld {
		s.withheld.Inc()
	}
	var groups [groupCount][]wgv1alpha2.PolicyReportResult
	for _, r := range kept {
		process := report.ProcessAdmission
		if s.background[r.Policy] {
			process = report.ProcessBackground // Kyverno derives it from the policy
		}
		r.Properties = maps.Clone(r.Properties) // shared: never modified in place
		if r.Properties == nil {
			r.Properties = map[string]string{}
		}
		r.Properties["process"] = process
		g := groupCEL
		if r.Source == engine.SourceKyverno || r.Source == "" {
			g = groupAudit
			if s.enforce[r.Policy] {
				g = groupEnforce
			}
		}
		groups[g] = append(groups[g], r)
	}
	obj := s.controlledObject(a)
	generated := s.generated(a, obj)
	mutated, mutateLabels, checks := s.mutated(a, obj)
	s.mu.Unlock()
	// The images are verified outside the lock: registries are slow.
	mutated, mutateLabels = checks.verify(s, obj, mutated, mutateLabels)
	groups[groupMutate] = mutated
	if len(mutateLabels) > 0 { // the request's labels are the bridge's: never changed in place
		policyLabels = maps.Clone(policyLabels)
		if policyLabels == nil {
			policyLabels = map[string]string{}
		}
		maps.Copy(policyLabels, mutateLabels)
	}
	for g, results := range groups {
		if len(results) == 0 {
			continue
		}
		gvr, obj, err := s.ephemeralReport(a, results, labelsOf(reportGroup(g), results, policyLabels))
		if err != nil {
			logr.FromContextOrDiscard(s.ctx).Error(err, "encode EphemeralReport")
			continue
		}
		if reportGroup(g) == groupCEL {
			s.create(gvr, obj) // before the answer
			continue
		}
		if reportGroup(g) == groupMutate && a.Request.Operation == "CREATE" {
			// Kyverno's mutating webhook sees a CREATE before the object
			// has a UID: its report names the resource by type, namespace
			// and name only (Kyverno's reports controller adopts it).
			labels := obj.GetLabels()
			delete(labels, report.LabelResourceUID)
			obj.SetLabels(labels)
		}
		go s.create(gvr, obj)
	}
	for _, g := range generated {
		go s.writeGenerated(a, g)
	}
}

// controlledObject is the object of an admitted CREATE or UPDATE that
// Kyverno's mutating webhook and background controller act on, or nil
// (none of their policies, another operation). The caller holds s.mu.
func (s *standin) controlledObject(a admission.Admitted) map[string]any {
	if (len(s.controlled) == 0 && len(s.generating) == 0) || (a.Request.Operation != "CREATE" && a.Request.Operation != "UPDATE") {
		return nil
	}
	var obj map[string]any
	if err := json.Unmarshal(a.Request.Object.Raw, &obj); err != nil {
		return nil
	}
	return obj
}

// generation is one policy's generate results on a trigger.
type generation struct {
	policy          string
	namespaced      bool
	resourceVersion string
	// labelKey is the report's policy label (default: a classic policy's).
	labelKey string
	results  []wgv1alpha2.PolicyReportResult
}

// generated are the results Kyverno's background controller reports for
// the classic generate and mutateExisting rules that apply to an admitted
// CREATE or UPDATE (the trigger): pass; a generate rule's with no message
// and property generated-resources naming the resource its generate block
// names ("/v1, Kind=Secret Name=x Namespace=y"; variables are not
// substituted), a mutateExisting rule's one per target with property
// patched-target naming it the same way; process as the policy's. The
// stand-in generates and mutates nothing. The caller holds s.mu.
func (s *standin) generated(a admission.Admitted, obj map[string]any) []generation {
	if obj == nil {
		return nil
	}
	var out []generation
	for name, cp := range s.controlled {
		if cp.compiled.Namespace != "" && cp.compiled.Namespace != a.Subject.Namespace {
			continue
		}
		g := generation{policy: name, namespaced: cp.compiled.Namespace != "", resourceVersion: cp.resourceVersion}
		process := report.ProcessAdmission
		if s.background[name] {
			process = report.ProcessBackground
		}
		for _, r := range cp.compiled.ControllerRulesApplying(obj, nil) {
			result := wgv1alpha2.PolicyReportResult{
				Source: engine.SourceKyverno, Policy: name, Rule: r.Name, Result: wgv1alpha2.ResultPass, Scored: true,
				Timestamp: metav1.Timestamp{Seconds: time.Now().Unix()},
			}
			switch {
			case r.Type == "generate" && r.Raw.Generate != nil:
				var target targetRef
				if err := json.Unmarshal(r.Raw.Generate.Raw, &target); err != nil {
					continue
				}
				result.Properties = map[string]string{"process": process, "generated-resources": target.String()}
				g.results = append(g.results, result)
			case r.Type == "mutate" && r.Raw.Mutate != nil:
				// mutateExisting: one result per target, on the trigger.
				var m struct{ Targets []targetRef }
				if err := json.Unmarshal(r.Raw.Mutate.Raw, &m); err != nil {
					continue
				}
				for _, target := range m.Targets {
					result := result
					result.Message = "mutated " + target.Kind + "/" + target.Name
					if target.Namespace != "" {
						result.Message += " in namespace " + target.Namespace
					}
					result.Properties = map[string]string{"process": process, "patched-target": target.String()}
					g.results = append(g.results, result)
				}
			}
		}
		if len(g.results) > 0 {
			out = append(out, g)
		}
	}
	// GeneratingPolicies: rule and policy its name, "policy evaluated
	// successfully", process always admission review (as Kyverno 1.19);
	// the stand-in generates nothing, so generated-resources is empty.
	for name, gp := range s.generating {
		if !gp.applies(s.ctx, obj) {
			continue
		}
		out = append(out, generation{policy: name, resourceVersion: gp.resourceVersion, labelKey: "gpol.kyverno.io/" + name,
			results: []wgv1alpha2.PolicyReportResult{{
				Source: "KyvernoGeneratingPolicy", Policy: name, Rule: name, Result: wgv1alpha2.ResultPass, Scored: true,
				Message: "policy evaluated successfully", Timestamp: metav1.Timestamp{Seconds: time.Now().Unix()},
				Properties: map[string]string{"process": report.ProcessAdmission, "generated-resources": ""},
			}}})
	}
	return out
}

// targetRef names a resource a generate or mutateExisting rule acts on.
type targetRef struct{ APIVersion, Kind, Name, Namespace string }

// String names it as Kyverno's reports do: "/v1, Kind=Secret Name=x
// Namespace=y".
func (t targetRef) String() string {
	gv, _ := schema.ParseGroupVersion(t.APIVersion)
	s := gv.WithKind(t.Kind).String() + " Name=" + t.Name
	if t.Namespace != "" {
		s += " Namespace=" + t.Namespace
	}
	return s
}

// verifyImages evaluates a policy's verifyImages rule on an admitted
// object, its images verified: the rule's result, if it has one.
func (s *standin) verifyImages(p *engine.Policy, rule string, obj map[string]any) (engine.RuleResult, bool) {
	for _, r := range p.Evaluate(s.ctx, &engine.Request{Object: obj, Images: s.images}) {
		if r.Rule == rule {
			return r, true
		}
	}
	return engine.RuleResult{}, false
}

// mutatesExisting says whether a mutate rule has targets (mutateExisting).
func mutatesExisting(r kyvernov1.Rule) bool {
	if r.Mutate == nil {
		return false
	}
	var m struct{ Targets []json.RawMessage }
	return json.Unmarshal(r.Mutate.Raw, &m) == nil && len(m.Targets) > 0
}

// backgroundControllerDelay is how long after the admission the stand-in's
// "background controller" writes its report: Kyverno's processes an
// UpdateRequest after the request, once the trigger is stored.
const backgroundControllerDelay = time.Second

// writeGenerated writes a generate report as Kyverno's background
// controller does: on the trigger, source background-scan, owned by it.
func (s *standin) writeGenerated(a admission.Admitted, g generation) {
	select {
	case <-s.ctx.Done():
		return
	case <-time.After(backgroundControllerDelay):
	}
	ctx, cancel := context.WithTimeout(s.ctx, creationTimeout)
	defer cancel()
	gvk := schema.GroupVersionKind{Group: a.Request.Kind.Group, Version: a.Request.Kind.Version, Kind: a.Request.Kind.Kind}
	trigger, err := s.client.Resource(a.GVR).Namespace(a.Subject.Namespace).Get(ctx, a.Subject.Name, metav1.GetOptions{})
	if err != nil {
		return // gone, or never stored: Kyverno's controller has no trigger either
	}
	owner := metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: trigger.GetName(), UID: trigger.GetUID()}
	policyLabel := "cpol.kyverno.io/" + g.policy
	switch {
	case g.labelKey != "":
		policyLabel = g.labelKey
	case g.namespaced:
		_, plain, _ := strings.Cut(g.policy, "/")
		policyLabel = "pol.kyverno.io/" + plain
	}
	meta := metav1.ObjectMeta{
		GenerateName: string(trigger.GetUID()) + "-", Namespace: a.Subject.Namespace, OwnerReferences: []metav1.OwnerReference{owner},
		Labels: map[string]string{
			"app.kubernetes.io/managed-by": "kyverno", report.LabelSource: "background-scan",
			report.LabelResourceUID: string(trigger.GetUID()), report.LabelResourceGroup: gvk.Group, report.LabelResourceVersion: gvk.Version,
			report.LabelResourceKind: gvk.Kind, policyLabel: g.resourceVersion,
		},
		Annotations: map[string]string{report.AnnotationResourceName: a.Subject.Name, report.AnnotationResourceNamespace: a.Subject.Namespace},
	}
	gvr, u, err := ephemeral(meta, kyvernov2.ReportSpec{Owner: owner, Results: g.results, Summary: wgv1alpha2.SummaryOf(g.results)})
	if err != nil {
		logr.FromContextOrDiscard(s.ctx).Error(err, "encode a background controller's EphemeralReport")
		return
	}
	s.create(gvr, u)
}

// mutated are the results of the classic mutate rules that apply to an
// admitted CREATE or UPDATE, as Kyverno's mutating webhook reports them
// (pass, "mutated Kind/name in namespace NS"), and their policies' labels.
// The stand-in mutates nothing (it serves no mutating webhook), and it
// reports them only for requests its validating webhook records, with
// results of validate rules too (those reach write). The verifyImages
// rules that apply are returned to verify (imageChecks.verify), which asks
// registries: the caller holds s.mu, and verifies after releasing it.
func (s *standin) mutated(a admission.Admitted, obj map[string]any) ([]wgv1alpha2.PolicyReportResult, map[string]string, imageChecks) {
	if obj == nil {
		return nil, nil, nil
	}
	var results []wgv1alpha2.PolicyReportResult
	var checks imageChecks
	labels := map[string]string{}
	now := metav1.Timestamp{Seconds: time.Now().Unix()}
	for name, mp := range s.controlled {
		if mp.compiled.Namespace != "" && mp.compiled.Namespace != a.Subject.Namespace {
			continue
		}
		for _, r := range mp.compiled.ControllerRulesApplying(obj, nil) {
			process := report.ProcessAdmission
			if s.background[name] {
				process = report.ProcessBackground
			}
			key := "cpol.kyverno.io/" + name
			if mp.compiled.Namespace != "" {
				key = "pol.kyverno.io/" + strings.TrimPrefix(name, mp.compiled.Namespace+"/")
			}
			var message string
			switch {
			case r.Type == "verifyImages":
				checks = append(checks, imageCheck{policy: mp.compiled, name: name, rule: r.Name, process: process, label: key, resourceVersion: mp.resourceVersion})
				continue
			case r.Type == "mutate" && !mutatesExisting(r.Raw): // mutateExisting: the background controller's (generated)
				message = fmt.Sprintf("mutated %s/%s", a.Subject.Kind, a.Subject.Name)
				if a.Subject.Namespace != "" {
					message += " in namespace " + a.Subject.Namespace
				}
			default:
				continue
			}
			results = append(results, wgv1alpha2.PolicyReportResult{
				Source: engine.SourceKyverno, Policy: name, Rule: r.Name, Result: wgv1alpha2.ResultPass, Scored: true, Timestamp: now,
				Message:    message,
				Properties: map[string]string{"process": process},
			})
			labels[key] = mp.resourceVersion
		}
	}
	return results, labels, checks
}

// imageCheck is a verifyImages rule that applies to an admitted object.
type imageCheck struct {
	policy                 *engine.Policy
	name, rule, process    string
	label, resourceVersion string
}

type imageChecks []imageCheck

// verify verifies the images of each rule, as Kyverno's mutating webhook
// does (with tally's engine and verifier), and adds the rules' results
// and their policies' labels.
func (cs imageChecks) verify(s *standin, obj map[string]any, results []wgv1alpha2.PolicyReportResult, labels map[string]string) ([]wgv1alpha2.PolicyReportResult, map[string]string) {
	for _, c := range cs {
		res, ok := s.verifyImages(c.policy, c.rule, obj)
		if !ok {
			continue
		}
		results = append(results, wgv1alpha2.PolicyReportResult{
			Source: engine.SourceKyverno, Policy: c.name, Rule: c.rule, Result: res.Result, Scored: true,
			Timestamp: metav1.Timestamp{Seconds: time.Now().Unix()}, Message: res.Message,
			Properties: map[string]string{"process": c.process},
		})
		if labels == nil {
			labels = map[string]string{}
		}
		labels[c.label] = c.resourceVersion
	}
	return results, labels
}

// labelsOf keeps of a request's policy labels those of the policies whose
// results a report holds.
func labelsOf(g reportGroup, results []wgv1alpha2.PolicyReportResult, policyLabels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range policyLabels {
		classic := strings.HasPrefix(k, "cpol.kyverno.io/") || strings.HasPrefix(k, "pol.kyverno.io/")
		if classic == (g == groupCEL) {
			continue
		}
		_, name, _ := strings.Cut(k, "/")
		if slices.ContainsFunc(results, func(r wgv1alpha2.PolicyReportResult) bool {
			return r.Policy == name || strings.HasSuffix(r.Policy, "/"+name)
		}) {
			out[k] = v
		}
	}
	return out
}

// ephemeralReport is an EphemeralReport (ClusterEphemeralReport for a
// cluster-scoped resource) as Kyverno 1.19 writes one.
func (s *standin) ephemeralReport(a admission.Admitted, results []wgv1alpha2.PolicyReportResult, policyLabels map[string]string) (schema.GroupVersionResource, *unstructured.Unstructured, error) {
	labels := map[string]string{
		"app.kubernetes.io/managed-by": "kyverno",
		report.LabelResourceGroup:      a.GVR.Group, report.LabelResourceVersion: a.GVR.Version, report.LabelResourceKind: a.Subject.Kind,
		report.LabelResourceUID: string(a.Subject.UID), report.LabelSource: "admission",
	}
	if v := report.GVRLabel(a.GVR); len(v) <= 63 {
		labels[report.LabelResourceGVR] = v
	}
	maps.Copy(labels, policyLabels)
	meta := metav1.ObjectMeta{
		GenerateName: string(a.Request.UID) + "-", Namespace: a.Subject.Namespace, Labels: labels,
		Annotations: map[string]string{report.AnnotationResourceName: a.Subject.Name, report.AnnotationResourceNamespace: a.Subject.Namespace},
	}
	gvr, u, err := ephemeral(meta, kyvernov2.ReportSpec{Results: results, Summary: wgv1alpha2.SummaryOf(results)})
	if err != nil {
		return gvr, nil, err
	}
	// Kyverno writes the owner as an empty object, every field present.
	_ = unstructured.SetNestedMap(u.Object, map[string]any{"apiVersion": "", "kind": "", "name": "", "uid": ""}, "spec", "owner")
	return gvr, u, nil
}

// ephemeral is an EphemeralReport, or a ClusterEphemeralReport when meta
// has no namespace.
func ephemeral(meta metav1.ObjectMeta, spec kyvernov2.ReportSpec) (schema.GroupVersionResource, *unstructured.Unstructured, error) {
	var obj any = &reportsv1.EphemeralReport{TypeMeta: metav1.TypeMeta{APIVersion: "reports.kyverno.io/v1", Kind: "EphemeralReport"}, ObjectMeta: meta, Spec: spec}
	gvr := apiresources.EphemeralReport
	if meta.Namespace == "" {
		obj = &reportsv1.ClusterEphemeralReport{TypeMeta: metav1.TypeMeta{APIVersion: "reports.kyverno.io/v1", Kind: "ClusterEphemeralReport"}, ObjectMeta: meta, Spec: spec}
		gvr = apiresources.ClusterEphemeralReport
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return gvr, nil, err
	}
	return gvr, &unstructured.Unstructured{Object: u}, nil
}

// create writes one report, within creationTimeout.
func (s *standin) create(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	ctx, cancel := context.WithTimeout(s.ctx, creationTimeout)
	defer cancel()
	namespace, _, _ := unstructured.NestedString(u.Object, "metadata", "namespace")
	_, err := s.client.Resource(gvr).Namespace(namespace).Create(ctx, u, metav1.CreateOptions{FieldManager: "kyverno"})
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) {
			logr.FromContextOrDiscard(s.ctx).Error(err, "create EphemeralReport", "namespace", namespace, "resource", u.GetAnnotations()[report.AnnotationResourceName])
		}
		return
	}
	s.created.WithLabelValues(gvr.Resource).Inc()
}

// reported returns the results of a request that Kyverno 1.19 reports, and
// the policy labels of its report: without the ValidatingPolicies' when
// deniedBy (withheld). The caller holds s.mu.
func (s *standin) reported(a admission.Admitted) (results []wgv1alpha2.PolicyReportResult, policyLabels map[string]string, withheld bool) {
	if !s.deniedBy(a.Results) {
		return a.Results, a.PolicyLabels, false
	}
	results = slices.DeleteFunc(slices.Clone(a.Results), func(r wgv1alpha2.PolicyReportResult) bool {
		return r.Source == engine.SourceValidatingPolicy
	})
	policyLabels = maps.Clone(a.PolicyLabels)
	maps.DeleteFunc(policyLabels, func(k, _ string) bool { return strings.HasPrefix(k, "vpol.kyverno.io/") })
	return results, policyLabels, true
}

// deniedBy reports whether a ValidatingPolicy with the Deny action matched
// the request (it gave a result, whatever the result). Kyverno 1.19 then
// reports no ValidatingPolicy result of the request. The caller holds s.mu.
func (s *standin) deniedBy(results []wgv1alpha2.PolicyReportResult) bool {
	for _, r := range results {
		if r.Source == engine.SourceValidatingPolicy && s.deny[r.Policy] {
			return true
		}
	}
	return false
}
