package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/merge"
)

// waitForPolicyReport waits until the final report of a resource holds
// exactly want ("policy/rule" -> result); nil means no report.
func waitForPolicyReport(ctx context.Context, t *testing.T, cfg *envconf.Config, obj k8s.Object, want map[string]string) *wgv1alpha2.PolicyReport {
	t.Helper()
	var last wgv1alpha2.PolicyReport
	var lastResults map[string]string
	err := wait.For(func(ctx context.Context) (bool, error) {
		var r wgv1alpha2.PolicyReport
		err := cfg.Client().Resources(obj.GetNamespace()).Get(ctx, string(obj.GetUID()), obj.GetNamespace(), &r)
		if apierrors.IsNotFound(err) {
			lastResults = nil
			return want == nil, nil
		}
		if err != nil {
			return false, err
		}
		last = r
		got := map[string]string{}
		for _, res := range r.Results {
			got[res.Policy+"/"+res.Rule] = string(res.Result)
		}
		lastResults = got
		if want == nil || len(got) != len(want) {
			return false, nil
		}
		for k, v := range want {
			if got[k] != v {
				return false, nil
			}
		}
		return true, nil
	}, wait.WithTimeout(60*time.Second), wait.WithInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("policy report of %s/%s: got %v, want %v", obj.GetNamespace(), obj.GetName(), lastResults, want)
	}
	return &last
}

func TestMergerWritesPolicyReports(t *testing.T) {
	const ns = "merge-a"
	var (
		scanner   *runningScanner
		cancel    context.CancelFunc
		done      = make(chan error, 1)
		good, bad *corev1.Pod
		policy    = requireLabelsPolicy("require-labels-merge", "merge-*", "team", "owner")
	)
	f := features.New("final reports").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			good, bad = newPod(ns, "good", map[string]string{"team": "a"}), newPod(ns, "bad", nil)
			for _, o := range []k8s.Object{good, bad, policy} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), "default")
			dyn, err := dynamic.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			var mctx context.Context
			mctx, cancel = context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
			m := merge.New(dyn, merge.Options{Workers: 2, Background: scanner.hubClient})
			go func() { done <- m.Run(mctx) }()
			return ctx
		}).
		Assess("R14 R15 R16 a namespaced resource gets one PolicyReport named by its UID, owned by it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			rule := policy.Name + "/pods"
			waitForPolicyReport(ctx, t, cfg, good, map[string]string{rule: "pass"})
			r := waitForPolicyReport(ctx, t, cfg, bad, map[string]string{rule: "fail"})
			if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != bad.UID || r.Scope == nil || r.Scope.UID != bad.UID {
				t.Errorf("report not owned by or scoped to its Pod: owners %+v scope %+v", r.OwnerReferences, r.Scope)
			}
			if r.Labels["app.kubernetes.io/managed-by"] == "" {
				t.Errorf("report lacks the managed-by label: %v", r.Labels)
			}
			if r.Summary != (wgv1alpha2.PolicyReportSummary{Fail: 1}) {
				t.Errorf("R18 summary %+v does not count the results", r.Summary)
			}
			res := r.Results[0]
			if res.Source != "kyverno" || res.Timestamp.Seconds == 0 || res.Properties["process"] != "background scan" || !res.Scored {
				t.Errorf("R16 result lacks documented fields: %+v", res)
			}
			return ctx
		}).
		Assess("R19 fixing the resource replaces its entry; deleting the policy removes the report", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			bad.Labels = map[string]string{"team": "b"}
			if err := cfg.Client().Resources().Update(ctx, bad); err != nil {
				t.Fatal(err)
			}
			waitForPolicyReport(ctx, t, cfg, bad, map[string]string{policy.Name + "/pods": "pass"})
			if err := cfg.Client().Resources().Delete(ctx, policy); err != nil {
				t.Fatal(err)
			}
			waitForPolicyReport(ctx, t, cfg, good, nil)
			waitForPolicyReport(ctx, t, cfg, bad, nil)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			cancel()
			<-done
			scanner.stop()
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// intermediateSpec is a report spec about one resource with one result of
// policy/rule.
func intermediateSpec(kind, name string, uid types.UID, policy, rule string, result wgv1alpha2.Result) kyvernov2.ReportSpec {
	now := time.Now()
	results := []wgv1alpha2.PolicyReportResult{{Source: "kyverno", Policy: policy, Rule: rule, Result: result, Scored: true,
		Message: "written by another tool", Timestamp: metav1.Timestamp{Seconds: now.Unix()}}}
	return kyvernov2.ReportSpec{
		Owner:   metav1.OwnerReference{APIVersion: "v1", Kind: kind, Name: name, UID: uid},
		Results: results, Summary: wgv1alpha2.SummaryOf(results),
	}
}

func intermediateMeta(ns string, uid types.UID, gvr string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: string(uid), Namespace: ns, Labels: map[string]string{
		"audit.kyverno.io/resource.uid": string(uid), "audit.kyverno.io/resource.gvr": gvr,
	}}
}

// mergerCounter reads a counter of reg with the given label value.
func mergerCounter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

func TestMergerDeletesOrphanedReports(t *testing.T) {
	const ns = "merge-orphans"
	var (
		cancel    context.CancelFunc
		done      = make(chan error, 1)
		reg       = prometheus.NewRegistry()
		live      *corev1.Pod
		policy    = requireLabelsPolicy("merge-orphans", "merge-*", "team", "owner")
		ghostUID  = types.UID(uuid.NewString())
		ghostNS   = types.UID(uuid.NewString())
		unknownID = types.UID(uuid.NewString())
		ghost     *kyvernov2.BackgroundScanReport
		ghostCl   *kyvernov2.ClusterBackgroundScanReport
		liveRep   *kyvernov2.BackgroundScanReport
		unknown   *kyvernov2.BackgroundScanReport
	)
	f := features.New("orphaned intermediate reports").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			live = newPod(ns, "live", nil)
			for _, o := range []k8s.Object{live, policy} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			// None has an ownerReference: the garbage collector cannot help.
			ghost = &kyvernov2.BackgroundScanReport{ObjectMeta: intermediateMeta(ns, ghostUID, "v1.pods"),
				Spec: intermediateSpec("Pod", "ghost", ghostUID, policy.Name, "pods", wgv1alpha2.ResultFail)}
			ghostCl = &kyvernov2.ClusterBackgroundScanReport{ObjectMeta: intermediateMeta("", ghostNS, "v1.namespaces"),
				Spec: intermediateSpec("Namespace", "merge-ghost", ghostNS, policy.Name, "pods", wgv1alpha2.ResultFail)}
			liveRep = &kyvernov2.BackgroundScanReport{ObjectMeta: intermediateMeta(ns, live.UID, "v1.pods"),
				Spec: intermediateSpec("Pod", live.Name, live.UID, policy.Name, "pods", wgv1alpha2.ResultFail)}
			// A resource type the server does not serve: the check cannot
			// tell, so the report stays.
			unknown = &kyvernov2.BackgroundScanReport{ObjectMeta: intermediateMeta(ns, unknownID, "example.com.v1.widgets"),
				Spec: intermediateSpec("Widget", "w", unknownID, policy.Name, "pods", wgv1alpha2.ResultFail)}
			unknown.Spec.Owner.APIVersion = "example.com/v1"
			for _, o := range []k8s.Object{ghost, ghostCl, liveRep, unknown} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			rc := cfg.Client().RESTConfig()
			dyn, err := dynamic.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			disco, err := discovery.NewDiscoveryClientForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			var mctx context.Context
			mctx, cancel = context.WithCancel(logr.NewContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 1})))
			m := merge.New(dyn, merge.Options{Workers: 2, Registry: reg, OrphanGrace: time.Second, OrphanTick: 200 * time.Millisecond,
				OrphanRecheck: time.Hour, OrphanQPS: 50, RESTConfig: rc, Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))})
			go func() { done <- m.Run(mctx) }()
			return ctx
		}).
		Assess("a report without ownerReference gets its final report", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			waitForPolicyReport(ctx, t, cfg, live, map[string]string{policy.Name + "/pods": "fail"})
			return ctx
		}).
		Assess("R19 the reports of resources that do not exist go, with their final reports", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			err := wait.For(func(ctx context.Context) (bool, error) {
				for _, o := range []k8s.Object{ghost, ghostCl} {
					if err := r.Get(ctx, o.GetName(), o.GetNamespace(), o); !apierrors.IsNotFound(err) {
						return false, nil
					}
				}
				var polr wgv1alpha2.PolicyReport
				if err := r.Get(ctx, string(ghostUID), ns, &polr); !apierrors.IsNotFound(err) {
					return false, nil
				}
				var cpolr wgv1alpha2.ClusterPolicyReport
				if err := r.Get(ctx, string(ghostNS), "", &cpolr); !apierrors.IsNotFound(err) {
					return false, nil
				}
				return true, nil
			}, wait.WithTimeout(60*time.Second), wait.WithInterval(200*time.Millisecond))
			if err != nil {
				t.Fatalf("orphaned reports or their final reports remain (checks: alive %v gone %v unknown %v)",
					mergerCounter(t, reg, "tally_merge_orphan_checks_total", "alive"), mergerCounter(t, reg, "tally_merge_orphan_checks_total", "gone"),
					mergerCounter(t, reg, "tally_merge_orphan_checks_total", "unknown"))
			}
			if got := mergerCounter(t, reg, "tally_merge_orphaned_reports_deleted_total", "backgroundscanreports") +
				mergerCounter(t, reg, "tally_merge_orphaned_reports_deleted_total", "clusterbackgroundscanreports"); got != 2 {
				t.Errorf("orphaned reports deleted by the merger: %v, want 2", got)
			}
			return ctx
		}).
		Assess("the report of a live resource, and one the check cannot judge, stay", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			// Wait until both were checked, then look.
			err := wait.For(func(ctx context.Context) (bool, error) {
				return mergerCounter(t, reg, "tally_merge_orphan_checks_total", "alive") >= 1 &&
					mergerCounter(t, reg, "tally_merge_orphan_checks_total", "unknown") >= 1, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatal("the live Pod's and the unknown kind's reports were never checked")
			}
			r := cfg.Client().Resources()
			if err := r.Get(ctx, liveRep.Name, ns, &kyvernov2.BackgroundScanReport{}); err != nil {
				t.Errorf("the live Pod's report: %v", err)
			}
			if err := r.Get(ctx, unknown.Name, ns, &kyvernov2.BackgroundScanReport{}); err != nil {
				t.Errorf("the report of an unknown kind: %v", err)
			}
			waitForPolicyReport(ctx, t, cfg, live, map[string]string{policy.Name + "/pods": "fail"})
			return ctx
		}).
		Assess("R19 deleting the live Pod's report removes its final report", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Delete(ctx, liveRep); err != nil {
				t.Fatal(err)
			}
			waitForPolicyReport(ctx, t, cfg, live, nil)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			cancel()
			<-done
			r := cfg.Client().Resources()
			_ = r.Delete(ctx, policy)
			_ = r.Delete(ctx, unknown)
			_ = r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
