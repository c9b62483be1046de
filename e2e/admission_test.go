package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/report"
)

// warningRecorder keeps the admission warnings a client receives.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// runningBridge is an admission bridge started in-process on loopback.
type runningBridge struct {
	bridge *admission.Bridge
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
}

func startBridge(t *testing.T, cfg *rest.Config, secretNamespace, configuration string, options ...func(*admission.Options)) *runningBridge {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The webhook writes through a recorder of its own, as in tally-scanner.
	reg := prometheus.NewRegistry()
	rec := admission.NewRecorder(dyn, admission.RecorderOptions{FlushInterval: 200 * time.Millisecond, Registry: reg})
	opts := admission.Options{
		Listen: "127.0.0.1:0", SecretNamespace: secretNamespace, SecretName: "adm-webhook-tls",
		WebhookConfiguration: configuration, Recorder: rec, Registry: reg, ClientCAFile: webhookClientCA,
	}
	for _, o := range options {
		o(&opts)
	}
	b := admission.New(dyn, kube, memory.NewMemCacheClient(disc), opts)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 1})))
	rb := &runningBridge{bridge: b, cancel: cancel, done: make(chan error, 1), reg: reg}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rec.Run(ctx) }()
	go func() { err := b.Run(ctx); cancel(); wg.Wait(); rb.done <- err }()
	if err := wait.For(func(context.Context) (bool, error) { return b.Addr() != "", nil },
		wait.WithTimeout(60*time.Second), wait.WithInterval(100*time.Millisecond)); err != nil {
		cancel()
		t.Fatalf("admission bridge did not start serving: %v", err)
	}
	return rb
}

func (rb *runningBridge) stop(t *testing.T) {
	rb.cancel()
	if err := <-rb.done; err != nil {
		t.Errorf("admission bridge: %v", err)
	}
}

// emittingWarnings sets spec.emitWarning: Audit failures come back as
// admission warnings only then, as in Kyverno.
func emittingWarnings(p *kyvernov1.ClusterPolicy) *kyvernov1.ClusterPolicy {
	p.Spec.EmitWarning = ptr.To(true)
	return p
}

func admissionPolicy(name, action, label string) *kyvernov1.ClusterPolicy {
	return &kyvernov1.ClusterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pod-policies.kyverno.io/autogen-controllers": "none"}},
		Spec: kyvernov1.Spec{
			ValidationFailureAction: kyvernov1.ValidationFailureAction(action),
			Rules: []kyvernov1.Rule{{
				Name:     "require-" + label,
				Match:    kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{{Resources: kyvernov1.ResourceDescription{Kinds: []string{"Pod"}, Namespaces: []string{"adm-*"}}}}},
				Validate: &kyvernov1.Validation{Message: "label " + label + " is required", Pattern: labelPattern(label)},
			}},
		},
	}
}

func webhookConfiguration(name, url, selectorLabel string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate.adm.tally.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url)},
			FailurePolicy:           &fail,
			SideEffects:             &sideEffects,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{selectorLabel: "on"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods", "configmaps"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
		}},
	}
}

// admissionResults reads a resource's AdmissionReport as "policy/rule=result".
func admissionResults(ctx context.Context, cfg *envconf.Config, ns, uid string) (map[string]string, *kyvernov2.AdmissionReport, error) {
	var r kyvernov2.AdmissionReport
	if err := cfg.Client().Resources(ns).Get(ctx, uid, ns, &r); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	// Its entries: spec.results and those packed in the annotation.
	results, err := report.IntermediateResults(r.Spec.Results, r.Annotations)
	if err != nil {
		return nil, nil, err
	}
	r.Spec.Results = results
	// The newest result per rule, across the report's sections (one per
	// content hash; Kyverno's ingested results carry none).
	out := map[string]string{}
	newest := map[string]metav1.Timestamp{}
	for _, res := range r.Spec.Results {
		k := res.Policy + "/" + res.Rule
		if t, ok := newest[k]; ok && (t.Seconds > res.Timestamp.Seconds || (t.Seconds == res.Timestamp.Seconds && t.Nanos > res.Timestamp.Nanos)) {
			continue
		}
		out[k], newest[k] = string(res.Result), res.Timestamp
	}
	return out, &r, nil
}

func waitForAdmissionReport(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, uid string, ok func(map[string]string, *kyvernov2.AdmissionReport) bool) *kyvernov2.AdmissionReport {
	t.Helper()
	var last map[string]string
	var report *kyvernov2.AdmissionReport
	err := wait.For(func(ctx context.Context) (bool, error) {
		got, r, err := admissionResults(ctx, cfg, ns, uid)
		if err != nil {
			return false, err
		}
		last, report = got, r
		return r != nil && ok(got, r), nil
	}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("admission report %s/%s: last %v: %v", ns, uid, last, err)
	}
	return report
}

func TestAdmissionBridge(t *testing.T) {
	const (
		ns            = "adm-a"
		selectorLabel = "tally.dev/adm-e2e"
		configName    = "adm-tally"
	)
	var (
		bridge   *runningBridge
		kube     *kubernetes.Clientset
		warnings = &warningRecorder{}
		enforce  = admissionPolicy("adm-enforce", "Enforce", "team")
		audit    = emittingWarnings(admissionPolicy("adm-audit", "Audit", "owner"))
		admitted *corev1.Pod
	)
	f := features.New("admission bridge").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{selectorLabel: "on"}}}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*kyvernov1.ClusterPolicy{enforce, audit} {
				if err := r.Create(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			bridge = startBridge(t, cfg.Client().RESTConfig(), "default", configName)
			if err := r.Create(ctx, webhookConfiguration(configName, "https://"+bridge.bridge.Addr()+"/validate", selectorLabel)); err != nil {
				t.Fatal(err)
			}
			rc := rest.CopyConfig(cfg.Client().RESTConfig())
			rc.WarningHandler = warnings
			var err error
			if kube, err = kubernetes.NewForConfig(rc); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("tally sets the CA bundle and the API server calls the webhook", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			err := wait.For(func(ctx context.Context) (bool, error) {
				var vwc admissionregistrationv1.ValidatingWebhookConfiguration
				if err := cfg.Client().Resources().Get(ctx, configName, "", &vwc); err != nil {
					return false, err
				}
				return len(vwc.Webhooks[0].ClientConfig.CABundle) > 0, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatalf("caBundle never set: %v", err)
			}
			// The API server picks the configuration up asynchronously: probe
			// with dry runs (which record nothing) until the webhook answers.
			err = wait.For(func(ctx context.Context) (bool, error) {
				_, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "probe", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err != nil && strings.Contains(err.Error(), "require-team"), nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(200*time.Millisecond))
			if err != nil {
				t.Fatalf("the webhook never denied the probe: %v", err)
			}
			warnings.take()
			return ctx
		}).
		Assess("an Enforce failure is denied by the API server, naming the rule", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			_, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "denied", map[string]string{"owner": "o"}), metav1.CreateOptions{})
			if err == nil {
				t.Fatal("a Pod failing an Enforce rule was admitted")
			}
			for _, want := range []string{"denied the request", "adm-enforce", "require-team", "label team is required"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			return ctx
		}).
		Assess("an Audit failure is admitted with a warning and gets one AdmissionReport", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var err error
			admitted, err = kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "audited", map[string]string{"team": "a"}), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if w := warnings.take(); len(w) != 1 || !strings.Contains(w[0], "adm-audit.require-owner") {
				t.Errorf("warnings = %q, want one naming adm-audit.require-owner", w)
			}
			r := waitForAdmissionReport(ctx, t, cfg, ns, string(admitted.UID), func(got map[string]string, _ *kyvernov2.AdmissionReport) bool {
				return got["adm-audit/require-owner"] == "fail" && got["adm-enforce/require-team"] == "pass"
			})
			labels := r.Labels
			if labels[report.LabelResourceUID] != string(admitted.UID) || labels[report.LabelResourceGVR] != "pods.v1" ||
				labels[report.LabelResourceHash] == "" || labels["app.kubernetes.io/managed-by"] != "tally" ||
				labels["cpol.kyverno.io/adm-audit"] == "" || labels["cpol.kyverno.io/adm-enforce"] == "" {
				t.Errorf("labels = %v", labels)
			}
			if r.Spec.Owner.UID != admitted.UID || r.Spec.Owner.Kind != "Pod" || r.Spec.Owner.Name != "audited" {
				t.Errorf("owner = %+v", r.Spec.Owner)
			}
			if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != admitted.UID {
				t.Errorf("ownerReferences = %+v", r.OwnerReferences)
			}
			if r.Spec.Summary.Fail != 1 || r.Spec.Summary.Pass != 1 {
				t.Errorf("summary = %+v", r.Spec.Summary)
			}
			for _, res := range r.Spec.Results {
				if res.Properties["process"] != "admission review" {
					t.Errorf("result %s/%s process = %q", res.Policy, res.Rule, res.Properties["process"])
				}
			}
			return ctx
		}).
		Assess("updates merge into the same report object", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			_, before, err := admissionResults(ctx, cfg, ns, string(admitted.UID))
			if err != nil || before == nil {
				t.Fatalf("report before updates: %v", err)
			}
			for i := range 2 {
				p, err := kube.CoreV1().Pods(ns).Get(ctx, admitted.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				p.Annotations = map[string]string{"round": fmt.Sprint(i)}
				if _, err := kube.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitForAdmissionReport(ctx, t, cfg, ns, string(admitted.UID), func(_ map[string]string, r *kyvernov2.AdmissionReport) bool {
				return r.Labels[report.LabelResourceHash] != before.Labels[report.LabelResourceHash]
			})
			var list kyvernov2.AdmissionReportList
			if err := cfg.Client().Resources(ns).List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range list.Items {
				if r.Labels[report.LabelResourceUID] == string(admitted.UID) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d AdmissionReports for one resource, want 1", n)
			}
			return ctx
		}).
		Assess("a dry run is answered but records nothing", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			warnings.take() // those of the updates
			dry, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "dry", map[string]string{"team": "a"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			if w := warnings.take(); len(w) != 1 {
				t.Errorf("dry run warnings = %q, want the Audit one", w)
			}
			// A real request after the dry run: once its report exists, the
			// dry run's results would have been flushed too.
			later, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "later", map[string]string{"team": "a"}), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitForAdmissionReport(ctx, t, cfg, ns, string(later.UID), func(got map[string]string, _ *kyvernov2.AdmissionReport) bool {
				return got["adm-audit/require-owner"] == "fail"
			})
			var list kyvernov2.AdmissionReportList
			if err := cfg.Client().Resources(ns).List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			for _, r := range list.Items {
				if r.Spec.Owner.Name == "dry" || (dry.UID != "" && r.Name == string(dry.UID)) {
					t.Errorf("the dry run was recorded: %s", r.Name)
				}
			}
			if len(list.Items) != 2 {
				t.Errorf("%d AdmissionReports in %s, want 2 (audited, later)", len(list.Items), ns)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			// The webhook configuration goes first: it would intercept other tests.
			_ = r.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: configName}})
			if bridge != nil {
				bridge.stop(t)
			}
			_ = r.Delete(ctx, enforce)
			_ = r.Delete(ctx, audit)
			_ = r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			_ = r.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "adm-webhook-tls", Namespace: "default"}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
