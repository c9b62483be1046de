package e2e

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	reportsv1 "github.com/tally-dev/tally/api/reports/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/report"
)

// runningIngester is a merger reading Kyverno's admission reports, as
// tally-merger runs beside Kyverno (--ingest-kyverno-reports), with an
// empty hand-over standing for a scanner that has scanned everything and
// found nothing to report: no webhook of tally's own.
type runningIngester struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
	hub    *httptest.Server
}

func startIngester(t *testing.T, cfg *rest.Config) *runningIngester {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hub := handover.New(handover.Options{})
	hub.SetReady()
	ri := &runningIngester{reg: prometheus.NewRegistry(), done: make(chan struct{}), hub: httptest.NewServer(hub)}
	hubClient, err := dynamic.NewForConfig(&rest.Config{Host: ri.hub.URL})
	if err != nil {
		t.Fatal(err)
	}
	m := merge.New(dyn, merge.Options{Workers: 2, Registry: ri.reg, Background: hubClient, Ingest: true})
	var ctx context.Context
	ctx, ri.cancel = context.WithCancel(logr.NewContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 1})))
	go func() { _ = m.Run(ctx); close(ri.done) }()
	return ri
}

func (ri *runningIngester) stop() {
	ri.cancel()
	<-ri.done
	ri.hub.Close()
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
		Message: "validation rule '" + rule + "' passed.", Properties: map[string]string{"process": "admission review"},
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

// R20 beside Kyverno: the merger reads Kyverno's EphemeralReports itself,
// writes the final reports from them (no AdmissionReport of tally's in
// between) and deletes each once merged; one naming no resource is deleted
// unmerged.
func TestIngestKyvernoReportsWithoutTallysWebhook(t *testing.T) {
	const ns = "ing-a"
	var ing *runningIngester
	// Admission only: no scan would recompute its results.
	policy := &kyvernov1.ClusterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-require-team"},
		Spec: kyvernov1.Spec{
			Background: new(bool),
			Rules: []kyvernov1.Rule{{
				Name:     "require-team",
				Match:    kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{{Resources: kyvernov1.ResourceDescription{Kinds: []string{"ConfigMap", "Namespace"}}}}},
				Validate: &kyvernov1.Validation{Message: "label team is required", Pattern: labelPattern("team")},
			}},
		},
	}
	f := features.New("Kyverno 1.19 admission reports merged by the merger alone").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			if err := cfg.Client().Resources().Create(ctx, policy); err != nil {
				t.Fatal(err)
			}
			ing = startIngester(t, cfg.Client().RESTConfig())
			return ctx
		}).
		Assess("each report is merged into its resource's final report and deleted", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
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
			final := waitForPolicyReport(ctx, t, cfg, cm, map[string]string{"smoke-require-team/require-team": "pass"})
			if got := final.Results[0].Properties[report.PropertyProcess]; got != report.ProcessAdmission {
				t.Errorf("process = %q, want %q", got, report.ProcessAdmission)
			}
			err = wait.For(func(ctx context.Context) (bool, error) {
				var c wgv1alpha2.ClusterPolicyReport
				if err := r.Get(ctx, string(nsObj.UID), "", &c); err != nil {
					return false, nil
				}
				return len(c.Results) == 1 && c.Scope != nil && c.Scope.Kind == "Namespace" && c.Scope.Name == ns, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Errorf("no ClusterPolicyReport for the Namespace: %v", err)
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
			if len(list.Items) != 0 {
				t.Errorf("%d AdmissionReports in %s, want 0: Kyverno's reports go to the merger directly", len(list.Items), ns)
			}
			if got := ing.metric(t, "tally_merge_admission_reports_deleted_total", map[string]string{"resource": "ephemeralreports"}); got != 1 {
				t.Errorf("deleted{ephemeralreports} = %v, want 1", got)
			}
			if got := ing.metric(t, "tally_merge_unusable_reports_total", nil); got != 1 {
				t.Errorf("unusable = %v, want 1", got)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ing.stop()
			_ = cfg.Client().Resources().Delete(ctx, policy)
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
