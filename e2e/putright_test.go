package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/merge"
)

// R48 on a real API server: a final report someone else edits (fail to
// pass, a time in 2099) or deletes is put right within seconds through the
// merger's metadata watch, without the resource changing; the merger's own
// writes are not taken for someone else's.
func TestMergerPutsRightReportsChangedBehindItsBack(t *testing.T) {
	const ns = "merge-putright"
	var (
		scanner *runningScanner
		cancel  context.CancelFunc
		done    = make(chan error, 1)
		reg     = prometheus.NewRegistry()
		bad     *corev1.Pod
		policy  = requireLabelsPolicy("require-labels-putright", "merge-*", "team", "owner")
	)
	rule := policy.Name + "/pods"
	f := features.New("final reports are tally's").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			bad = newPod(ns, "bad", nil)
			for _, o := range []k8s.Object{bad, policy} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), "default")
			dyn, err := dynamic.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			md, err := metadata.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			var mctx context.Context
			mctx, cancel = context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
			m := merge.New(dyn, merge.Options{Workers: 2, Background: scanner.hubClient, Metadata: md, Registry: reg})
			go func() { done <- m.Run(mctx) }()
			waitForPolicyReport(ctx, t, cfg, bad, map[string]string{rule: "fail"})
			return ctx
		}).
		Assess("an edit from fail to pass with a time in 2099 is put right within seconds", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var r wgv1alpha2.PolicyReport
			if err := cfg.Client().Resources(ns).Get(ctx, string(bad.UID), ns, &r); err != nil {
				t.Fatal(err)
			}
			r.Results[0].Result = wgv1alpha2.ResultPass
			r.Results[0].Timestamp = metav1.Timestamp{Seconds: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Unix()}
			r.Summary = wgv1alpha2.SummaryOf(r.Results)
			start := time.Now()
			if err := cfg.Client().Resources(ns).Update(ctx, &r); err != nil {
				t.Fatal(err)
			}
			got := waitForPolicyReport(ctx, t, cfg, bad, map[string]string{rule: "fail"})
			t.Logf("edited report put right in %s", time.Since(start).Round(time.Millisecond))
			if got.Results[0].Timestamp.Seconds > time.Now().Unix() {
				t.Errorf("the time in the future stayed: %v", got.Results[0].Timestamp)
			}
			if n := mergerCounter(t, reg, "tally_merge_reports_put_right_total", "edited"); n < 1 {
				t.Errorf("put right{edited} = %v, want at least 1", n)
			}
			return ctx
		}).
		Assess("a delete is put right within seconds", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			start := time.Now()
			if err := cfg.Client().Resources(ns).Delete(ctx, &wgv1alpha2.PolicyReport{ObjectMeta: metav1.ObjectMeta{Name: string(bad.UID), Namespace: ns}}); err != nil {
				t.Fatal(err)
			}
			waitForPolicyReport(ctx, t, cfg, bad, map[string]string{rule: "fail"})
			t.Logf("deleted report put right in %s", time.Since(start).Round(time.Millisecond))
			// Its own writes are not someone else's: nothing more is put right.
			time.Sleep(2 * time.Second)
			if n := mergerCounter(t, reg, "tally_merge_reports_put_right_total", "edited"); n != 1 {
				t.Errorf("put right{edited} = %v after the merger's own writes, want 1", n)
			}
			return ctx
		}).
		Assess("the resource deleted, its report stays gone", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Delete(ctx, bad); err != nil {
				t.Fatal(err)
			}
			waitForPolicyReport(ctx, t, cfg, bad, nil)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			cancel()
			<-done
			scanner.stop()
			// The policy is cluster-wide: the other tests of the package
			// (the webhook's rules among them) must not see it.
			if err := cfg.Client().Resources().Delete(ctx, policy); err != nil {
				t.Errorf("delete the policy: %v", err)
			}
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
