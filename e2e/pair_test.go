package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/controllers/pair"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/shard"
	"github.com/tally-dev/tally/hack/benchutil"
	"github.com/tally-dev/tally/internal/process"
	"github.com/tally-dev/tally/report"
)

// A pair as its two containers run it, with the shipped defaults
// (sharded): the scanner joins its shard group through a membership Lease
// and hands over a ready hand-over; the merger beside it follows that
// scanner and becomes ready. Once their contexts end, both return with
// every part stopped: the Lease deleted, the hand-over's and the probes'
// ports closed, no goroutine left. Meanwhile, together, they give a
// resource a policy fails its final report.
func TestAPairRunsAndStopsWhole(t *testing.T) {
	f := features.New("pair.RunScanner and pair.RunMerger").
		Assess("runs sharded, and stops wholly", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			kube, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			const namespace, identity = "tally-pair-test", "pair-test-0"
			if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			probes, err := benchutil.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			handoverAddr, err := benchutil.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			mergerProbes, err := benchutil.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			o := pair.ScannerOptions{
				Options: process.Options{Name: "tally-scanner", Kubeconfig: cfg.KubeconfigFile(), Namespace: namespace,
					QPS: 50, Burst: 100, Listen: probes, Identity: identity},
				Workers: 2, Interval: time.Hour, EvalTimeout: 10 * time.Second, StateConfigMap: "tally-scan-state",
				Sharding: true, ShardGroup: "pair-test", PolicyStatus: false,
				MaxQueuedEvents: policyevents.DefaultMaxQueuedEvents, EventsQPS: policyevents.DefaultEventsQPS,
				Handover: pair.HandoverOptions{Listen: handoverAddr, ReportAPI: string(report.APIWGPolicy), ManagedBy: "tally-pair-test"},
				HTTP:     data.HTTPOptions{Timeout: data.DefaultHTTPTimeout},
			}
			mo := pair.MergerOptions{
				Options: process.Options{Name: "tally-merger", Kubeconfig: cfg.KubeconfigFile(), Namespace: namespace,
					QPS: 50, Burst: 100, Listen: mergerProbes},
				Merge:      merge.Options{Workers: 2, ManagedBy: "tally-pair-test", ReportAPI: report.APIWGPolicy},
				ScannerURL: "http://" + handoverAddr, KeySecret: "tally-pair-test-key",
			}
			// Every goroutine RunScanner and RunMerger start is owned and
			// waited for (issue 57): after they return, none of them is left.
			before := goleak.IgnoreCurrent()
			runCtx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
			done := make(chan error, 1)
			go func() { done <- pair.RunScanner(runCtx, o) }()
			mergerCtx, cancelMerger := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
			mergerDone := make(chan error, 1)
			go func() { mergerDone <- pair.RunMerger(mergerCtx, mo) }()
			stopped, mergerStopped := false, false
			defer func() {
				cancel()
				cancelMerger()
				if !stopped {
					<-done
				}
				if !mergerStopped {
					<-mergerDone
				}
			}()

			// Joined: its membership Lease, then (a Lease duration later, 15 s)
			// its shard scanned and the hand-over ready for the merger.
			ready := func(url string) bool {
				resp, err := http.Get(url)
				if err != nil {
					return false
				}
				_ = resp.Body.Close() // read nothing of it
				return resp.StatusCode == http.StatusOK
			}
			// awaitReady polls a process's url until it answers 200, failing
			// when the process returns first or after limit; stop ends it and
			// waits for it to return.
			awaitReady := func(what, url string, limit time.Duration, done chan error, stopped *bool) {
				t.Helper()
				err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, limit, true, func(context.Context) (bool, error) {
					select {
					case err := <-done:
						*stopped = true
						return false, fmt.Errorf("it returned before it was stopped: %v", err)
					default:
						return ready(url), nil
					}
				})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			stop := func(what string, cancel func(), done chan error, stopped *bool) {
				t.Helper()
				cancel()
				select {
				case err := <-done:
					*stopped = true
					if err != nil {
						t.Errorf("%s stopped with %v, want nil", what, err)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("%s did not return within 30 s of its context's end", what)
				}
			}
			awaitReady("the hand-over, within 90 s", "http://"+handoverAddr+"/readyz", 90*time.Second, done, &stopped)
			if _, err := kube.CoordinationV1().Leases(namespace).Get(ctx, shard.LeaseName(identity), metav1.GetOptions{}); err != nil {
				t.Fatalf("the membership Lease of a sharded scanner: %v", err)
			}
			if !ready("http://" + probes + "/readyz") {
				t.Error("the scanner's /readyz is not ready while its hand-over is")
			}
			// The merger follows the ready scanner, lists everything and is
			// ready in turn.
			awaitReady("the merger beside a ready scanner, within 60 s", "http://"+mergerProbes+"/readyz", 60*time.Second, mergerDone, &mergerStopped)
			// The two together report: a Policy of the namespace and a
			// ConfigMap it fails give the ConfigMap a final PolicyReport,
			// written by the merger from the scanner's hand-over.
			dyn, err := dynamic.NewForConfig(cfg.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			policy := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "kyverno.io/v1", "kind": "Policy",
				"metadata": map[string]any{"name": "pair-require-team", "namespace": namespace},
				"spec": map[string]any{"background": true, "rules": []any{map[string]any{
					"name":     "require-team",
					"match":    map[string]any{"any": []any{map[string]any{"resources": map[string]any{"kinds": []any{"ConfigMap"}, "names": []any{"pair-cm"}}}}},
					"validate": map[string]any{"message": "label team is required", "pattern": map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "?*"}}}},
				}}},
			}}
			if _, err := dyn.Resource(apiresources.Policy).Namespace(namespace).Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			// The policy and its ConfigMap go with the test: the other tests
			// of this control plane see no policy of it (a webhook's rules
			// follow every policy).
			defer func() {
				_ = dyn.Resource(apiresources.Policy).Namespace(namespace).Delete(context.Background(), "pair-require-team", metav1.DeleteOptions{})
				_ = kube.CoreV1().ConfigMaps(namespace).Delete(context.Background(), "pair-cm", metav1.DeleteOptions{})
			}()
			cm, err := kube.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pair-cm"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var last any
			err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
				r, err := dyn.Resource(apiresources.PolicyReport).Namespace(namespace).Get(ctx, string(cm.UID), metav1.GetOptions{})
				if err != nil {
					last = err
					return false, nil
				}
				results, _, _ := unstructured.NestedSlice(r.Object, "results")
				last = results
				return r.GetLabels()[report.LabelManagedBy] == "tally-pair-test" && len(results) == 1 &&
					results[0].(map[string]any)["result"] == "fail", nil
			})
			if err != nil {
				t.Fatalf("no final report of the pair for the ConfigMap within 90 s (last: %v)", last)
			}
			stop("RunMerger", cancelMerger, mergerDone, &mergerStopped)
			stop("RunScanner", cancel, done, &stopped)
			// Returned: every part has stopped.
			if _, err := kube.CoordinationV1().Leases(namespace).Get(ctx, shard.LeaseName(identity), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the membership Lease after the scanner stopped: %v, want it deleted", err)
			}
			for what, addr := range map[string]string{"hand-over": handoverAddr, "scanner's probes and metrics": probes, "merger's probes and metrics": mergerProbes} {
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("the %s port %s is still held after RunScanner returned: %v", what, addr, err)
					continue
				}
				_ = l.Close() // only probed
			}
			http.DefaultClient.CloseIdleConnections() // this test's probes
			if err := goleak.Find(before,
				// client-go keeps its transports (and their idle connections
				// to the API server) for the process: not the scanner's.
				goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
				goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			); err != nil {
				t.Errorf("goroutines left after RunScanner and RunMerger returned: %v", err)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
