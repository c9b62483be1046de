package e2e

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2beta1 "github.com/tally-dev/tally/api/kyverno/v2beta1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/merge"
)

// Kyverno serves ClusterPolicy and Policy as kyverno.io/v1 and v2beta1 with
// one schema; manifests written for v2beta1 are accepted by tally's CRDs and
// evaluated like v1 ones (tally reads v1, which the API server serves for
// policies created in either version).
func TestPoliciesCreatedAsV2beta1AreEvaluated(t *testing.T) {
	const ns = "v2beta1-a" // not scan-*: TestScannerWritesBackgroundReports counts what matches that
	var (
		scanner *runningScanner
		cancel  context.CancelFunc
		done    = make(chan error, 1)
		v1Form  = requireLabelsPolicy("v2beta1-require-labels", ns, "team", "owner")
		cpol    = &kyvernov2beta1.ClusterPolicy{ObjectMeta: v1Form.ObjectMeta, Spec: v1Form.Spec}
		pol     = &kyvernov2beta1.Policy{
			ObjectMeta: metav1.ObjectMeta{Name: "v2beta1-ns", Namespace: ns, Annotations: v1Form.Annotations},
			Spec:       kyvernov1.Spec{Rules: v1Form.Spec.Rules[:1]},
		}
		bad  = newPod(ns, "bad", nil)
		good = newPod(ns, "good", map[string]string{"team": "a"})
	)
	f := features.New("kyverno.io/v2beta1 policies").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			for _, o := range []k8s.Object{cpol, pol, bad, good} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatalf("create %T %s: %v", o, o.GetName(), err)
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
		Assess("a v2beta1 ClusterPolicy is served as v1 too", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var got kyvernov1.ClusterPolicy
			if err := cfg.Client().Resources().Get(ctx, cpol.Name, "", &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Spec.Rules) != 2 || got.Spec.Rules[0].Name != "pods" {
				t.Errorf("read as v1: rules %+v", got.Spec.Rules)
			}
			return ctx
		}).
		Assess("v2beta1 ClusterPolicy and Policy results are reported", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			pass, fail := string(wgv1alpha2.ResultPass), string(wgv1alpha2.ResultFail)
			waitForResults(ctx, t, cfg, bad, map[string]string{cpol.Name + "/pods": fail, ns + "/" + pol.Name + "/pods": fail})
			waitForResults(ctx, t, cfg, good, map[string]string{cpol.Name + "/pods": pass, ns + "/" + pol.Name + "/pods": pass})
			// The merger keeps results of the policies it knows: it knows these.
			waitForPolicyReport(ctx, t, cfg, bad, map[string]string{cpol.Name + "/pods": fail, ns + "/" + pol.Name + "/pods": fail})
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if cancel != nil {
				cancel()
				<-done
			}
			scanner.stop()
			_ = cfg.Client().Resources().Delete(ctx, cpol)
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
