package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

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
			m := merge.New(dyn, merge.Options{Workers: 2})
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
