package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	reportsv1 "github.com/tally-dev/tally/api/reports/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/report"
)

// runningIngester is the ingestion of Kyverno's admission reports alone, as
// tally-scanner runs it beside Kyverno (--webhook-listen= --ingest-kyverno-reports):
// no webhook of tally's own.
type runningIngester struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

func startIngester(t *testing.T, cfg *rest.Config, clk clock.WithTicker) *runningIngester {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ri := &runningIngester{reg: prometheus.NewRegistry(), done: make(chan struct{})}
	rec := admission.NewRecorder(dyn, admission.RecorderOptions{FlushInterval: 200 * time.Millisecond, Registry: ri.reg, Clock: clk})
	in := admission.NewIngester(dyn, memory.NewMemCacheClient(disc), rec)
	var ctx context.Context
	ctx, ri.cancel = context.WithCancel(logr.NewContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 1})))
	recDone := make(chan struct{})
	go func() { rec.Run(ctx); close(recDone) }()
	go func() { _ = in.Run(ctx); <-recDone; close(ri.done) }()
	return ri
}

func (ri *runningIngester) stop() {
	ri.cancel()
	<-ri.done
}

// metric sums the samples of a counter or gauge whose labels include the given pairs.
func (ri *runningIngester) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return sumMetric(t, ri.reg, name, labels)
}

// kyvernoEphemeralReport is a report exactly as Kyverno v1.19's admission
// controller writes one (../shared/kyverno-1.19/ephemeralreport-admission.yaml):
// generateName from the request UID, an empty spec.owner, no
// ownerReferences, the resource named by audit.kyverno.io labels and
// annotations. name "" leaves the resource.name annotation out.
func kyvernoEphemeralReport(ns, gvr, kind, name string, uid string, policy, rule string, result wgv1alpha2.Result) *reportsv1.EphemeralReport {
	annotations := map[string]string{report.AnnotationResourceNamespace: ns}
	if name != "" {
		annotations[report.AnnotationResourceName] = name
	}
	res := wgv1alpha2.PolicyReportResult{
		Policy: policy, Rule: rule, Result: result, Scored: true, Source: "kyverno",
		Message: "validation rule '" + rule + "' passed.", Properties: map[string]string{"process": "background scan"},
		Timestamp: metav1.Timestamp{Seconds: time.Now().Unix()},
	}
	return &reportsv1.EphemeralReport{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "91175ac1-157d-4c86-8d6f-46661c869527-", Namespace: ns, Annotations: annotations,
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": "kyverno", report.LabelResourceGroup: "", report.LabelResourceGVR: gvr,
				report.LabelResourceKind: kind, report.LabelResourceUID: uid, report.LabelResourceVersion: "v1",
				report.LabelSource: "admission", "cpol.kyverno.io/" + policy: "389",
			},
		},
		Spec: kyvernov2.ReportSpec{Results: []wgv1alpha2.PolicyReportResult{res}, Summary: wgv1alpha2.SummaryOf([]wgv1alpha2.PolicyReportResult{res})},
	}
}

func TestIngestKyvernoReportsWithoutTallysWebhook(t *testing.T) {
	const ns = "ing-a"
	var ing *runningIngester
	f := features.New("Kyverno 1.19 admission reports folded in by the ingestion alone").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			ing = startIngester(t, cfg.Client().RESTConfig(), clock.RealClock{})
			return ctx
		}).
		Assess("each report becomes the AdmissionReport of its resource, owned by it, and is deleted", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			kube := kubernetes.NewForConfigOrDie(cfg.Client().RESTConfig())
			cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "passing"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			nsObj, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r := cfg.Client().Resources()
			named := kyvernoEphemeralReport(ns, "configmaps.v1", "ConfigMap", "passing", string(cm.UID), "smoke-require-team", "require-team", wgv1alpha2.ResultPass)
			unnamed := kyvernoEphemeralReport(ns, "configmaps.v1", "ConfigMap", "", "00000000-0000-0000-0000-000000000001", "smoke-require-team", "require-team", wgv1alpha2.ResultPass)
			cluster := &reportsv1.ClusterEphemeralReport{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "91175ac1-", Labels: map[string]string{
					"app.kubernetes.io/managed-by": "kyverno", report.LabelResourceGroup: "", report.LabelResourceGVR: "namespaces.v1",
					report.LabelResourceKind: "Namespace", report.LabelResourceUID: string(nsObj.UID), report.LabelResourceVersion: "v1",
					report.LabelSource: "admission"},
					Annotations: map[string]string{report.AnnotationResourceName: ns}},
				Spec: kyvernov2.ReportSpec{Results: named.Spec.Results},
			}
			if err := r.Create(ctx, named); err != nil {
				t.Fatal(err)
			}
			if err := r.Create(ctx, unnamed); err != nil {
				t.Fatal(err)
			}
			if err := r.Create(ctx, cluster); err != nil {
				t.Fatal(err)
			}
			a := waitForAdmissionReport(ctx, t, cfg, ns, string(cm.UID), func(got map[string]string, _ *kyvernov2.AdmissionReport) bool {
				return got["smoke-require-team/require-team"] == "pass"
			})
			want := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "passing", UID: cm.UID}
			if a.Spec.Owner != want {
				t.Errorf("owner = %+v, want %+v", a.Spec.Owner, want)
			}
			if len(a.OwnerReferences) != 1 || a.OwnerReferences[0].UID != cm.UID {
				t.Errorf("ownerReferences = %+v: the report must go with its ConfigMap", a.OwnerReferences)
			}
			err = wait.For(func(ctx context.Context) (bool, error) {
				var c kyvernov2.ClusterAdmissionReport
				if err := r.Get(ctx, string(nsObj.UID), "", &c); err != nil {
					return false, nil
				}
				return c.Spec.Owner.Kind == "Namespace" && c.Spec.Owner.Name == ns, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Errorf("no ClusterAdmissionReport for the Namespace: %v", err)
			}
			err = wait.For(func(ctx context.Context) (bool, error) {
				var eph reportsv1.EphemeralReportList
				var ceph reportsv1.ClusterEphemeralReportList
				if err := r.WithNamespace(ns).List(ctx, &eph); err != nil {
					return false, err
				}
				if err := r.List(ctx, &ceph); err != nil {
					return false, err
				}
				return len(eph.Items) == 0 && len(ceph.Items) == 0, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Errorf("Kyverno's reports were not all deleted (the one naming no resource included): %v", err)
			}
			var list kyvernov2.AdmissionReportList
			if err := r.WithNamespace(ns).List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 {
				t.Errorf("%d AdmissionReports in %s, want 1: a report naming no resource is folded into nothing", len(list.Items), ns)
			}
			if got := ing.metric(t, "tally_admission_report_batches_dropped_total", map[string]string{"reason": "no-resource"}); got != 1 {
				t.Errorf("dropped{no-resource} = %v, want 1", got)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ing.stop()
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// Results pending for a namespace that is deleted before they are written
// are dropped at the first refused write: not retried every flush, and
// never written into a namespace of the same name created afterwards.
func TestIngestDropsResultsOfADeletedNamespace(t *testing.T) {
	const ns = "ing-b"
	clk := clocktesting.NewFakeClock(time.Now())
	var ing *runningIngester
	f := features.New("pending admission results of a deleted namespace").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			ing = startIngester(t, cfg.Client().RESTConfig(), clk)
			return ctx
		}).
		Assess("no stale report, a bounded number of writes", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			kube := kubernetes.NewForConfigOrDie(cfg.Client().RESTConfig())
			r := cfg.Client().Resources()
			cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Create(ctx, kyvernoEphemeralReport(ns, "configmaps.v1", "ConfigMap", "doomed", string(cm.UID), "p", "r", wgv1alpha2.ResultFail)); err != nil {
				t.Fatal(err)
			}
			// The clock stands still: the results wait for a flush.
			pending := func(context.Context) (bool, error) {
				return ing.metric(t, "tally_admission_pending_reports", nil) == 1, nil
			}
			if err := wait.For(pending, wait.WithTimeout(30*time.Second), wait.WithInterval(50*time.Millisecond)); err != nil {
				t.Fatalf("the report was not ingested: %v", err)
			}
			if err := kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			err = wait.For(func(ctx context.Context) (bool, error) {
				_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}, wait.WithTimeout(60*time.Second), wait.WithInterval(200*time.Millisecond))
			if err != nil {
				t.Fatalf("namespace %s was not deleted: %v", ns, err)
			}
			clk.Step(time.Second) // flush: the write is refused
			err = wait.For(func(context.Context) (bool, error) {
				return ing.metric(t, "tally_admission_report_batches_dropped_total", map[string]string{"reason": "namespace-gone"}) == 1, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(50*time.Millisecond))
			if err != nil {
				t.Fatalf("the refused write was not dropped (writes: %v errors): %v", ing.metric(t, "tally_admission_report_writes_total", map[string]string{"op": "error"}), err)
			}
			if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for range 30 { // half an hour of flushes
				clk.Step(time.Minute)
				time.Sleep(20 * time.Millisecond)
			}
			var list kyvernov2.AdmissionReportList
			if err := r.WithNamespace(ns).List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 0 {
				t.Errorf("%d AdmissionReports in the new namespace %s: a stale report describing a resource that no longer exists", len(list.Items), ns)
			}
			if got := ing.metric(t, "tally_admission_report_writes_total", map[string]string{"op": "error"}); got != 1 {
				t.Errorf("%v failed writes, want exactly 1: a refused write is not retried", got)
			}
			if got := ing.metric(t, "tally_admission_pending_reports", nil); got != 0 {
				t.Errorf("pending = %v, want 0", got)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ing.stop()
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
