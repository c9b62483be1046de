package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// longGVR is a custom resource type whose GVR label would be 90 characters
// (more than a label value's 63), while each of its group, version and kind
// fits in one.
var longGVR = schema.GroupVersionResource{
	Group:    "verylong" + "abcdefghijklmnopqrstuvwxyzabcde" + "group.example.com",
	Version:  "verylongversion",
	Resource: "verylongresources",
}

const longKind = "VeryLongResource"

func longCRD() *apiextv1.CustomResourceDefinition {
	return &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: longGVR.Resource + "." + longGVR.Group},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: longGVR.Group,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: longGVR.Resource, Singular: "verylongresource", Kind: longKind, ListKind: longKind + "List"},
			Scope: apiextv1.NamespaceScoped,
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name: longGVR.Version, Served: true, Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTo(true),
				}},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// A resource whose GVR is longer than a label value gets its
// BackgroundScanReport (group, version and kind labels instead of the GVR
// label, which the API server would refuse) and its PolicyReport.
func TestLongGVRResourcesAreReported(t *testing.T) {
	const ns = "longgvr-a"
	var (
		scanner *runningScanner
		cancel  context.CancelFunc
		done    = make(chan error, 1)
		crd     = longCRD()
		cr      *unstructured.Unstructured
		policy  = &kyvernov1.ClusterPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "longgvr-require-team"},
			Spec: kyvernov1.Spec{Rules: []kyvernov1.Rule{{
				Name:     "team",
				Match:    kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{{Resources: kyvernov1.ResourceDescription{Kinds: []string{longKind}, Namespaces: []string{ns}}}}},
				Validate: &kyvernov1.Validation{Message: "label team is required", Pattern: labelPattern("team")},
			}}},
		}
	)
	f := features.New("long GVR").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ext, err := apiextclient.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			err = wait.For(func(ctx context.Context) (bool, error) {
				got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				for _, c := range got.Status.Conditions {
					if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
						return true, nil
					}
				}
				return false, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatalf("CRD not established: %v", err)
			}
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			if err := r.Create(ctx, policy); err != nil {
				t.Fatal(err)
			}
			dyn, err := dynamic.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			cr = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": longGVR.Group + "/" + longGVR.Version, "kind": longKind,
				"metadata": map[string]any{"name": "long", "namespace": ns},
				"spec":     map[string]any{"size": int64(3)},
			}}
			// The API server may take a moment to serve a new CRD's kind.
			err = wait.For(func(ctx context.Context) (bool, error) {
				created, err := dyn.Resource(longGVR).Namespace(ns).Create(ctx, cr, metav1.CreateOptions{})
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				cr = created
				return true, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatalf("create the custom resource: %v", err)
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), "default")
			var mctx context.Context
			mctx, cancel = context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
			m := merge.New(dyn, merge.Options{Workers: 2, Background: scanner.hubClient})
			go func() { done <- m.Run(mctx) }()
			return ctx
		}).
		Assess("the scanner writes its BackgroundScanReport with group, version and kind labels", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			waitForResults(ctx, t, cfg, cr, map[string]string{policy.Name + "/team": "fail"})
			bg, found, err := backgroundReport(ns, string(cr.GetUID()))
			if err != nil || !found {
				t.Fatalf("the scanner holds no report of the custom resource (%v)", err)
			}
			want := map[string]string{
				report.LabelResourceGroup: longGVR.Group, report.LabelResourceVersion: longGVR.Version, report.LabelResourceKind: longKind,
			}
			for k, v := range want {
				if bg.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, bg.Labels[k], v)
				}
			}
			if v, ok := bg.Labels[report.LabelResourceGVR]; ok {
				t.Errorf("label %s = %q: a GVR of %d characters cannot be a label value", report.LabelResourceGVR, v, len(report.GVRLabel(longGVR)))
			}
			return ctx
		}).
		Assess("the merger writes its PolicyReport", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := waitForPolicyReport(ctx, t, cfg, cr, map[string]string{policy.Name + "/team": "fail"})
			if r.Scope == nil || r.Scope.Kind != longKind || r.Scope.APIVersion != longGVR.Group+"/"+longGVR.Version {
				t.Errorf("scope %+v", r.Scope)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if cancel != nil {
				cancel()
				<-done
			}
			scanner.stop()
			_ = cfg.Client().Resources().Delete(ctx, policy)
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			if ext, err := apiextclient.NewForConfig(cfg.Client().RESTConfig()); err == nil {
				_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{})
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// A final report write the API server refuses for good (here: its namespace
// is terminating, held by a finalizer) is tried once, logged and counted,
// and not retried: neither by the queue nor after a rescan.
func TestMergerDropsRefusedReportWrites(t *testing.T) {
	const ns, hold = "refused-a", "tally.dev/e2e-hold"
	var (
		cancel  context.CancelFunc
		done    = make(chan error, 1)
		reg     = prometheus.NewRegistry()
		scanner *runningScanner
		held    = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns, Finalizers: []string{hold}}}
		policy  = requireLabelsPolicy("refused-require-labels", ns, "team", "owner")
	)
	f := features.New("refused report writes").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			if err := r.Create(ctx, held); err != nil {
				t.Fatal(err)
			}
			if err := r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			// The namespace controller deletes the namespace's content; the
			// finalizer keeps the ConfigMap, and so the namespace terminating.
			err := wait.For(func(ctx context.Context) (bool, error) {
				var cm corev1.ConfigMap
				if err := r.Get(ctx, held.Name, ns, &cm); err != nil {
					return false, err
				}
				held = &cm
				return cm.DeletionTimestamp != nil, nil
			}, wait.WithTimeout(60*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatalf("the namespace's content was never deleted: %v", err)
			}
			if err := r.Create(ctx, policy); err != nil {
				t.Fatal(err)
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), "default")
			dyn, err := dynamic.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			var mctx context.Context
			mctx, cancel = context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
			m := merge.New(dyn, merge.Options{Workers: 2, Background: scanner.hubClient, Registry: reg})
			go func() { done <- m.Run(mctx) }()
			return ctx
		}).
		Assess("the write is tried once, dropped and counted", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			dropped := func() float64 {
				return sumMetric(t, reg, "tally_merge_report_writes_dropped_total", map[string]string{"reason": watch.RefusedNamespaceGone})
			}
			err := wait.For(func(context.Context) (bool, error) { return dropped() == 1, nil },
				wait.WithTimeout(60*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatal("no final report write dropped")
			}
			scanner.waitSynced(t)
			if err := scanner.scanner.RescanAll(ctx); err != nil {
				t.Fatal(err)
			}
			scanner.waitSynced(t)
			time.Sleep(time.Second) // a retry, if any, would come within the queue's first backoff steps
			if got := dropped(); got != 1 {
				t.Errorf("dropped %v times, want once: a refused write is not retried", got)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if cancel != nil {
				cancel()
				<-done
			}
			scanner.stop()
			_ = cfg.Client().Resources().Delete(ctx, policy)
			// Release the ConfigMap: the namespace goes.
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			_ = cfg.Client().Resources().Patch(ctx, held, k8s.Patch{PatchType: types.MergePatchType, Data: patch})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
