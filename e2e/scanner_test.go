package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/tally-dev/tally/api"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/scan"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// writeCounter counts the API writes of a client to one kind of resource,
// in all and by namespace.
type writeCounter struct {
	match string
	n     atomic.Int64
	mu    sync.Mutex
	byNS  map[string]int
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet && strings.Contains(req.URL.Path, c.match) {
			c.n.Add(1)
			if _, rest, ok := strings.Cut(req.URL.Path, "/namespaces/"); ok {
				ns, _, _ := strings.Cut(rest, "/")
				c.mu.Lock()
				if c.byNS == nil {
					c.byNS = map[string]int{}
				}
				c.byNS[ns]++
				c.mu.Unlock()
			}
		}
		return rt.RoundTrip(req)
	})
}

// in tells the writes to reports of one namespace.
func (c *writeCounter) in(namespace string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byNS[namespace]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// outage makes a client's requests fail while it is on: with HTTP 503 or,
// when refuse is set, with "connection refused".
type outage struct {
	on, refuse atomic.Bool
	failed     atomic.Int64
}

func (o *outage) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if !o.on.Load() {
			return rt.RoundTrip(req)
		}
		o.failed.Add(1)
		if o.refuse.Load() {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Request: req,
			Header: http.Header{"Content-Type": []string{"text/plain"}}, Body: io.NopCloser(strings.NewReader("injected outage"))}, nil
	})
}

// runningScanner is a scanner started in-process against the test cluster.
type runningScanner struct {
	scanner *scan.Scanner
	// hub is where the scanner hands its reports over; hubClient reads it
	// as the merger does (over loopback).
	hub       *handover.Hub
	hubServer *httptest.Server
	hubClient dynamic.Interface
	reg       *prometheus.Registry
	writes    *writeCounter
	outage    *outage
	events    record.EventBroadcaster
	// results writes the result Events, as tally-scanner's (policyevents.Writer).
	results     *policyevents.Writer
	stopResults context.CancelFunc
	cancel      context.CancelFunc
	done        chan error
}

func startScanner(t *testing.T, cfg *rest.Config, namespace string) *runningScanner {
	t.Helper()
	return startScannerWith(t, cfg, namespace, &outage{})
}

// startScannerWith starts a scanner whose API requests fail while out is on;
// configure, if any, change its options.
func startScannerWith(t *testing.T, cfg *rest.Config, namespace string, out *outage, configure ...func(*scan.Options)) *runningScanner {
	t.Helper()
	events := record.NewBroadcaster()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), api.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	resultsCtx, stopResults := context.WithCancel(context.Background())
	results := policyevents.NewWriter(resultsCtx, kube.EventsV1(), scheme, policyevents.ControllerScan)
	cfg = rest.CopyConfig(cfg)
	wc := &writeCounter{match: "backgroundscanreports"}
	cfg.Wrap(wc.wrap)
	cfg.Wrap(out.wrap)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	hub := handover.New(handover.Options{})
	hubServer := httptest.NewServer(hub)
	hubClient, err := dynamic.NewForConfig(&rest.Config{Host: hubServer.URL})
	if err != nil {
		t.Fatal(err)
	}
	opts := scan.Options{
		Workers: 2, Interval: time.Hour, StateNamespace: namespace, StateName: "tally-scan-state", Registry: reg, Handover: hub,
		Recorder: events.NewRecorder(scheme, corev1.EventSource{Component: "tally-scanner"}),
		Events:   &policyevents.Emitter{Recorder: results},
	}
	for _, c := range configure {
		c(&opts)
	}
	s := scan.New(dyn, memory.NewMemCacheClient(disc), store, opts)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 1})))
	rs := &runningScanner{scanner: s, hub: hub, hubServer: hubServer, hubClient: hubClient, reg: reg, writes: wc, outage: out, events: events, results: results, stopResults: stopResults, cancel: cancel, done: make(chan error, 1)}
	go func() { rs.done <- s.Run(ctx) }()
	runningHubs.Store(rs, hub)
	return rs // the caller stops it (a feature's Teardown): t may be one step's subtest
}

var stopOnce sync.Map

func (rs *runningScanner) stop() {
	if _, loaded := stopOnce.LoadOrStore(rs, true); loaded {
		return
	}
	rs.cancel()
	<-rs.done
	runningHubs.Delete(rs)
	rs.hubServer.Close()
	rs.events.Shutdown()
	rs.stopResults()
	rs.results.Wait()
}

// runningMerger is a merger reading a running scanner's hand-over, as the
// merger beside the scanner in tally's Pod does.
type runningMerger struct {
	cancel context.CancelFunc
	done   chan error
}

// startMerger starts a merger beside rs; the caller stops it.
func startMerger(t *testing.T, cfg *rest.Config, rs *runningScanner) *runningMerger {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	m := &runningMerger{cancel: cancel, done: make(chan error, 1)}
	mg := merge.New(dyn, merge.Options{Workers: 2, Background: rs.hubClient})
	go func() { m.done <- mg.Run(ctx) }()
	return m
}

func (m *runningMerger) stop() {
	m.cancel()
	<-m.done
}

// runningHubs are the hand-overs of the scanners running (resultsOf reads
// them).
var runningHubs sync.Map

// handovers counts the reports the scanner handed over (created, replaced
// or withdrawn).
func (rs *runningScanner) handovers(t *testing.T) float64 {
	t.Helper()
	return rs.counter(t, "tally_scan_report_writes_total")
}

// counter reads a counter metric's value (summed over its labels).
func (rs *runningScanner) counter(t *testing.T, name string) float64 {
	t.Helper()
	return sumMetric(t, rs.reg, name, nil)
}

// sumMetric sums the samples (counters or gauges) of a metric of reg whose
// labels include the given ones.
func sumMetric(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == k && lp.GetValue() == v)
				}
				if !found {
					continue next
				}
			}
			sum += counterValue(m)
		}
	}
	return sum
}

// gauge reads one labelled sample of a metric (0 if absent).
func (rs *runningScanner) gauge(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := rs.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return counterValue(m)
		}
	}
	return 0
}

func counterValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

func (rs *runningScanner) waitSynced(t *testing.T) {
	t.Helper()
	err := wait.For(func(context.Context) (bool, error) { return rs.scanner.Synced(), nil },
		wait.WithTimeout(60*time.Second), wait.WithInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("scanner did not sync: %v", err)
	}
}

// backgroundReport reads the BackgroundScanReport a running scanner handed
// over for a resource.
func backgroundReport(ns, uid string) (*kyvernov2.BackgroundScanReport, bool, error) {
	var body []byte
	runningHubs.Range(func(_, v any) bool {
		b, ok := v.(*handover.Hub).Get(ns, uid)
		if ok {
			body = b
		}
		return !ok
	})
	if body == nil {
		return nil, false, nil
	}
	var r kyvernov2.BackgroundScanReport
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, true, err
	}
	return &r, true, nil
}

// resultsOf reads the background report of a resource as "policy/rule=result"
// strings; found is false when no running scanner holds one.
func resultsOf(_ context.Context, _ *envconf.Config, ns string, uid string) (map[string]string, bool, error) {
	r, found, err := backgroundReport(ns, uid)
	if !found || err != nil {
		return nil, found, err
	}
	results, err := report.IntermediateResults(r.Spec.Results, r.Annotations)
	if err != nil {
		return nil, true, err
	}
	out := map[string]string{}
	for _, res := range results {
		out[res.Policy+"/"+res.Rule] = string(res.Result)
	}
	return out, true, nil
}

// waitForResults waits until a resource's report holds exactly want (nil: no report).
func waitForResults(ctx context.Context, t *testing.T, cfg *envconf.Config, obj k8s.Object, want map[string]string) {
	t.Helper()
	var last map[string]string
	err := wait.For(func(ctx context.Context) (bool, error) {
		got, ok, err := resultsOf(ctx, cfg, obj.GetNamespace(), string(obj.GetUID()))
		if err != nil {
			return false, err
		}
		last = got
		if want == nil {
			return !ok, nil
		}
		if !ok || len(got) != len(want) {
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
		t.Fatalf("report of %s/%s: got %v, want %v", obj.GetNamespace(), obj.GetName(), last, want)
	}
}

func labelPattern(label string) *apiextv1.JSON {
	return &apiextv1.JSON{Raw: []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"?*"}}}`, label))}
}

// requireLabelsPolicy requires a label on Pods and another on ConfigMaps of
// the namespaces matching nsPattern (each test its own, so that tests never
// see each other's resources).
func requireLabelsPolicy(name, nsPattern, podLabel, cmLabel string) *kyvernov1.ClusterPolicy {
	rule := func(rule, kind, label string) kyvernov1.Rule {
		return kyvernov1.Rule{
			Name:     rule,
			Match:    kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{{Resources: kyvernov1.ResourceDescription{Kinds: []string{kind}, Namespaces: []string{nsPattern}}}}},
			Validate: &kyvernov1.Validation{Message: "label " + label + " is required", Pattern: labelPattern(label)},
		}
	}
	return &kyvernov1.ClusterPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			"pod-policies.kyverno.io/autogen-controllers": "none",
		}},
		Spec: kyvernov1.Spec{Rules: []kyvernov1.Rule{rule("pods", "Pod", podLabel), rule("configmaps", "ConfigMap", cmLabel)}},
	}
}

func newPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27"}}},
	}
}

func TestScannerWritesBackgroundReports(t *testing.T) {
	const ns = "scan-a"
	var (
		scanner         *runningScanner
		good, bad, bad2 *corev1.Pod
		cm              *corev1.ConfigMap
		policy          = requireLabelsPolicy("require-labels", "scan-*", "team", "owner")
		pass, fail      = string(wgv1alpha2.ResultPass), string(wgv1alpha2.ResultFail)
		podRule, cmRule = "require-labels/pods", "require-labels/configmaps"
	)
	f := features.New("background scan").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			good, bad, bad2 = newPod(ns, "good", map[string]string{"team": "a"}), newPod(ns, "bad", nil), newPod(ns, "bad2", nil)
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns, Labels: map[string]string{"owner": "x"}}}
			for _, o := range []k8s.Object{good, bad, bad2, cm, policy} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), "default")
			return ctx
		}).
		Assess("existing resources get their results", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			waitForResults(ctx, t, cfg, good, map[string]string{podRule: pass})
			waitForResults(ctx, t, cfg, bad, map[string]string{podRule: fail})
			waitForResults(ctx, t, cfg, cm, map[string]string{cmRule: pass})
			scanner.waitSynced(t)
			// R31: background results are counted by policy, rule and result.
			if got := scanner.gauge(t, "tally_scan_results", map[string]string{"policy": "require-labels", "rule": "pods", "result": "fail"}); got != 2 {
				t.Errorf("tally_scan_results{pods,fail} = %v, want 2 (bad and bad2)", got)
			}
			return ctx
		}).
		Assess("updating a resource rewrites only its report", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			before := scanner.handovers(t)
			bad.Labels = map[string]string{"team": "b"}
			if err := cfg.Client().Resources().Update(ctx, bad); err != nil {
				t.Fatal(err)
			}
			waitForResults(ctx, t, cfg, bad, map[string]string{podRule: pass})
			scanner.waitSynced(t)
			if got := scanner.handovers(t) - before; got != 1 {
				t.Errorf("one resource changed, %v reports handed over", got)
			}
			return ctx
		}).
		Assess("editing one rule re-evaluates only what that rule matches", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			evaluated := scanner.counter(t, "tally_scan_resources_processed_total")
			before := scanner.handovers(t)
			var p kyvernov1.ClusterPolicy
			r := cfg.Client().Resources()
			if err := r.Get(ctx, policy.Name, "", &p); err != nil {
				t.Fatal(err)
			}
			p.Spec.Rules[1].Validate.Pattern = labelPattern("tier") // the ConfigMap rule only
			if err := r.Update(ctx, &p); err != nil {
				t.Fatal(err)
			}
			waitForResults(ctx, t, cfg, cm, map[string]string{cmRule: fail})
			scanner.waitSynced(t)
			// The rule matches the ConfigMaps of scan-* namespaces: ours and
			// the kube-root-ca.crt the controller manager publishes there.
			var cms corev1.ConfigMapList
			if err := cfg.Client().Resources(ns).List(ctx, &cms); err != nil {
				t.Fatal(err)
			}
			if got := scanner.counter(t, "tally_scan_resources_processed_total") - evaluated; got != float64(len(cms.Items)) {
				t.Errorf("a ConfigMap rule changed: %v resources evaluated, want %d (the ConfigMaps of %s)", got, len(cms.Items), ns)
			}
			if got := scanner.handovers(t) - before; got != 1 {
				t.Errorf("one report changed, %v handed over", got)
			}
			return ctx
		}).
		Assess("a status-only policy update does nothing", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			evaluated := scanner.counter(t, "tally_scan_resources_processed_total")
			var p kyvernov1.ClusterPolicy
			r := cfg.Client().Resources()
			if err := r.Get(ctx, policy.Name, "", &p); err != nil {
				t.Fatal(err)
			}
			p.Status.Ready = true
			if err := r.UpdateStatus(ctx, &p); err != nil {
				t.Fatal(err)
			}
			err := wait.For(func(context.Context) (bool, error) {
				return scanner.scanner.PolicyResourceVersion(policy.Name) == p.ResourceVersion, nil
			}, wait.WithTimeout(30*time.Second), wait.WithInterval(50*time.Millisecond))
			if err != nil {
				t.Fatalf("scanner never saw the status update: %v", err)
			}
			scanner.waitSynced(t)
			if got := scanner.counter(t, "tally_scan_resources_processed_total") - evaluated; got != 0 {
				t.Errorf("a status-only update caused %v evaluations, want 0", got)
			}
			return ctx
		}).
		Assess("deleting a resource deletes its report", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Delete(ctx, bad2, func(o *metav1.DeleteOptions) { o.GracePeriodSeconds = ptr.To[int64](0) }); err != nil {
				t.Fatal(err)
			}
			waitForResults(ctx, t, cfg, bad2, nil)
			return ctx
		}).
		Assess("a restarted scanner writes nothing", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.stop()
			restarted := startScanner(t, cfg.Client().RESTConfig(), "default")
			restarted.waitSynced(t)
			if err := restarted.scanner.RescanAll(ctx); err != nil {
				t.Fatal(err)
			}
			if got := restarted.writes.n.Load(); got != 0 {
				t.Errorf("restart: %d BackgroundScanReport writes to the API server, want 0 (they are handed over on loopback)", got)
			}
			waitForResults(ctx, t, cfg, good, map[string]string{podRule: pass})
			scanner = restarted
			return ctx
		}).
		Assess("deleting the policy removes its entries", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Delete(ctx, policy); err != nil {
				t.Fatal(err)
			}
			waitForResults(ctx, t, cfg, good, nil)
			waitForResults(ctx, t, cfg, cm, nil)
			scanner.waitSynced(t)
			if got := scanner.gauge(t, "tally_scan_results", map[string]string{"policy": "require-labels", "rule": "pods", "result": "pass"}); got != 0 {
				t.Errorf("a deleted policy still counts %v results", got)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.stop()
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// eventReasons lists the reasons of the Events about an object.
func eventReasons(ctx context.Context, t *testing.T, cfg *envconf.Config, name string) []string {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	list, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason)
	}
	return out
}

func TestScannerRejectsInvalidPolicies(t *testing.T) {
	const ns = "scan-invalid"
	var (
		scanner *runningScanner
		pod     = newPod(ns, "p", nil)
		good    = requireLabelsPolicy("invalid-good", ns, "team", "owner")
		badCron = requireLabelsPolicy("invalid-cron", ns, "team", "owner")
		badUser = requireLabelsPolicy("invalid-userinfo", ns, "team", "owner")
		badPat  = requireLabelsPolicy("invalid-pattern", ns, "team", "owner")
		bad     = []*kyvernov1.ClusterPolicy{badCron, badUser, badPat}
	)
	badCron.Annotations[scan.AnnotationSchedule] = "every tuesday"
	badUser.Spec.Rules[0].Match.Any[0].Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}} // background is on by default
	badPat.Spec.Rules[0].Validate.Pattern = &apiextv1.JSON{Raw: []byte(`{"metadata":{"name":"{{ request.object.metadata.(( }}"}}`)}
	f := features.New("invalid policies").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			for _, o := range []k8s.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, pod, good, badCron, badUser, badPat} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), "default")
			return ctx
		}).
		Assess("the valid policy reports, the invalid ones are skipped", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			waitForResults(ctx, t, cfg, pod, map[string]string{"invalid-good/pods": string(wgv1alpha2.ResultFail)})
			scanner.waitSynced(t)
			if got, _, _ := resultsOf(ctx, cfg, ns, string(pod.UID)); len(got) != 1 {
				t.Errorf("report holds %v, want only invalid-good's entry", got)
			}
			return ctx
		}).
		Assess("each invalid policy gets a metric and an Event", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			for _, p := range bad {
				if got := scanner.gauge(t, "tally_scan_policy_errors_total", map[string]string{"policy": p.Name}); got < 1 {
					t.Errorf("tally_scan_policy_errors_total{policy=%s} = %v, want >= 1", p.Name, got)
				}
				err := wait.For(func(ctx context.Context) (bool, error) {
					for _, reason := range eventReasons(ctx, t, cfg, p.Name) {
						if reason == "PolicyRejected" {
							return true, nil
						}
					}
					return false, nil
				}, wait.WithTimeout(30*time.Second), wait.WithInterval(200*time.Millisecond))
				if err != nil {
					t.Errorf("no PolicyRejected Event on %s: %v", p.Name, err)
				}
			}
			if got := scanner.gauge(t, "tally_scan_policy_errors_total", map[string]string{"policy": good.Name}); got != 0 {
				t.Errorf("the valid policy counts %v errors", got)
			}
			return ctx
		}).
		Assess("a fixed policy is scanned", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var p kyvernov1.ClusterPolicy
			r := cfg.Client().Resources()
			if err := r.Get(ctx, badCron.Name, "", &p); err != nil {
				t.Fatal(err)
			}
			p.Annotations[scan.AnnotationSchedule] = "*/5 * * * *"
			if err := r.Update(ctx, &p); err != nil {
				t.Fatal(err)
			}
			fail := string(wgv1alpha2.ResultFail)
			waitForResults(ctx, t, cfg, pod, map[string]string{"invalid-good/pods": fail, "invalid-cron/pods": fail})
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.stop()
			r := cfg.Client().Resources()
			for _, p := range append(bad, good) {
				_ = r.Delete(ctx, p)
			}
			_ = r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestScannerSurvivesAPIOutages(t *testing.T) {
	const ns = "scan-outage"
	var (
		scanner *runningScanner
		pod     = newPod(ns, "p", nil)
		policy  = requireLabelsPolicy("outage", ns, "team", "owner")
		rule    = "outage/pods"
	)
	alive := func(t *testing.T) {
		t.Helper()
		select {
		case err := <-scanner.done:
			scanner.done <- err
			t.Fatalf("the scanner stopped during an API outage: %v", err)
		default:
		}
	}
	f := features.New("API outages").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			for _, o := range []k8s.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, pod, policy} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			out := &outage{}
			out.on.Store(true) // the API server answers 503 from the start
			scanner = startScannerWith(t, cfg.Client().RESTConfig(), "default", out)
			return ctx
		}).
		Assess("started during an outage, it waits and then scans", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			// It keeps trying through the outage (three refused requests),
			// and does not exit.
			err := wait.For(func(context.Context) (bool, error) { return scanner.outage.failed.Load() >= 3, nil },
				wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatalf("the scanner did not keep trying through the outage (%d requests failed): %v", scanner.outage.failed.Load(), err)
			}
			alive(t)
			scanner.outage.on.Store(false)
			waitForResults(ctx, t, cfg, pod, map[string]string{rule: string(wgv1alpha2.ResultFail)})
			return ctx
		}).
		Assess("a change seen during an outage is handed over: the hand-over needs no API server", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.waitSynced(t)
			scanner.outage.refuse.Store(true) // connection refused, this time
			scanner.outage.on.Store(true)
			pod.Labels = map[string]string{"team": "a"}
			if err := cfg.Client().Resources().Update(ctx, pod); err != nil { // the test's client is not cut off
				t.Fatal(err)
			}
			// The watch opened before the outage delivers the change; the
			// report goes to the merger on loopback, outage or not.
			waitForResults(ctx, t, cfg, pod, map[string]string{rule: string(wgv1alpha2.ResultPass)})
			alive(t)
			scanner.outage.on.Store(false)
			alive(t)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.stop()
			_ = cfg.Client().Resources().Delete(ctx, policy)
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// scanTimes reads the persisted last complete scan of each policy.
func scanTimes(ctx context.Context, t *testing.T, cfg *envconf.Config, ns string) map[string]time.Time {
	t.Helper()
	var cm corev1.ConfigMap
	if err := cfg.Client().Resources(ns).Get(ctx, "tally-scan-state", ns, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for k, v := range cm.Data {
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			t.Fatalf("scan state %s=%q: %v", k, v, err)
		}
		out[k] = at
	}
	return out
}

func TestScannerSchedulesPolicies(t *testing.T) {
	// The state ConfigMap is kept out of the scanned namespace: its every
	// update would change a scanned resource.
	const ns, stateNS = "scan-sched", "default"
	var (
		scanner *runningScanner
		pod     = newPod(ns, "p", nil)
		fast    = requireLabelsPolicy("sched-fast", ns, "team", "owner")
		hourly  = requireLabelsPolicy("sched-hourly", ns, "team", "owner")
		hourlyT time.Time
	)
	fast.Annotations[scan.AnnotationInterval] = "2s"
	// watchFast samples the fast policy's persisted scan time and metric for
	// d, and returns the distinct scan times seen.
	watchFast := func(ctx context.Context, t *testing.T, cfg *envconf.Config, d time.Duration) []time.Time {
		t.Helper()
		var seen []time.Time
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			at, ok := scanTimes(ctx, t, cfg, stateNS)[fast.Name]
			if ok && (len(seen) == 0 || !at.Equal(seen[len(seen)-1])) {
				seen = append(seen, at)
			}
			if since := scanner.gauge(t, "tally_scan_seconds_since_last_complete_scan", map[string]string{"policy": fast.Name}); since > 6 {
				t.Errorf("seconds since sched-fast's last scan = %v, want < 6 (a 2s interval)", since)
			}
		}
		return seen
	}
	f := features.New("per-policy schedules").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			for _, o := range []k8s.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, pod, fast, hourly} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), stateNS)
			return ctx
		}).
		Assess("a policy annotated with a 2s interval is rescanned every 2s, writing nothing", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			fail := string(wgv1alpha2.ResultFail)
			waitForResults(ctx, t, cfg, pod, map[string]string{"sched-fast/pods": fail, "sched-hourly/pods": fail})
			scanner.waitSynced(t)
			writes := scanner.handovers(t)
			err := wait.For(func(ctx context.Context) (bool, error) { // the scheduler ticks every second
				hourlyT = scanTimes(ctx, t, cfg, stateNS)[hourly.Name]
				return !hourlyT.IsZero(), nil
			}, wait.WithTimeout(10*time.Second), wait.WithInterval(100*time.Millisecond))
			if err != nil {
				t.Fatalf("no scan time persisted for %s: %v", hourly.Name, err)
			}
			seen := watchFast(ctx, t, cfg, 7*time.Second)
			if len(seen) < 3 {
				t.Errorf("sched-fast scanned at %v in 7s, want at least 3 scans", seen)
			}
			for i := 1; i < len(seen); i++ {
				if gap := seen[i].Sub(seen[i-1]); gap < 1500*time.Millisecond || gap > 4*time.Second {
					t.Errorf("sched-fast scans %s apart, want about 2s", gap)
				}
			}
			if got := scanTimes(ctx, t, cfg, stateNS)[hourly.Name]; !got.Equal(hourlyT) {
				t.Errorf("the hourly policy was rescanned: %s -> %s", hourlyT, got)
			}
			if got := scanner.handovers(t) - writes; got != 0 {
				t.Errorf("periodic rescans with nothing changed: %v reports handed over", got)
			}
			return ctx
		}).
		Assess("after a restart the persisted times hold: no storm, no skipped window", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.stop()
			scanner = startScanner(t, cfg.Client().RESTConfig(), stateNS)
			scanner.waitSynced(t)
			seen := watchFast(ctx, t, cfg, 5*time.Second)
			if len(seen) < 2 {
				t.Errorf("sched-fast scanned at %v in 5s after a restart, want at least 2 scans", seen)
			}
			if got := scanTimes(ctx, t, cfg, stateNS)[hourly.Name]; !got.Equal(hourlyT) {
				t.Errorf("the hourly policy was rescanned on restart: %s -> %s", hourlyT, got)
			}
			if got := scanner.writes.n.Load(); got != 0 {
				t.Errorf("restart: %d BackgroundScanReport writes to the API server, want 0", got)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.stop()
			r := cfg.Client().Resources()
			_ = r.Delete(ctx, fast)
			_ = r.Delete(ctx, hourly)
			_ = r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
