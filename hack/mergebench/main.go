// Command mergebench measures tally-merger against a real API server: N Pods
// over M namespaces, each with a BackgroundScanReport holding the results of
// the corpus's Pod Security Standards policies (computed by tally's engine,
// and handed over on loopback as tally-scanner hands them: a handover.Hub
// served by the bench), and those policies installed.
// It then runs tally-merger as its own process and reports the time from its
// start to all N PolicyReports written, its peak RSS, its API writes, and a
// restart with nothing changed (0 writes expected).
//
//	go run ./hack/mergebench --reports 10000 --namespaces 50
//
// The cluster is the local control plane of e2e/cluster (or E2E_KUBECONFIG).
// MERGEBENCH_HEAP=FILE saves the merger's heap profile after the first run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/hack/benchutil"
	"github.com/tally-dev/tally/internal/pss"
	"github.com/tally-dev/tally/report"
)

const metricWrites = "tally_merge_report_writes_total"

func main() {
	reports := flag.Int("reports", 1000, "Pods, each with one BackgroundScanReport")
	namespaces := flag.Int("namespaces", 50, "namespaces to spread them over")
	corpus := flag.String("corpus", "../shared/corpus", "the corpus holding policy-library/pod-security")
	bin := flag.String("merger", "", "a tally-merger binary to measure (default: built from ./cmd/tally-merger)")
	flag.Parse()
	if *reports <= 0 || *namespaces <= 0 {
		fmt.Fprintln(os.Stderr, "mergebench: --reports and --namespaces must be positive")
		os.Exit(2)
	}
	if err := run(*reports, *namespaces, *corpus, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "mergebench:", err)
		os.Exit(1)
	}
}

func run(n, namespaces int, corpus, bin string) error {
	ctx := context.Background()
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	c, err := benchutil.StartCluster(ctx, cluster.Options{NoControllerManager: true})
	if err != nil {
		return err
	}
	defer c.Stop()
	kube, dyn := c.Kube, c.Dyn

	policies, err := installPolicies(ctx, dyn, filepath.Join(corpus, "policy-library", "pod-security"))
	if err != nil {
		return err
	}
	fmt.Printf("installed %d Pod Security Standards policies\n", len(policies))
	start := time.Now()
	hub := handover.New(handover.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	go func() { _ = hub.Serve(serveCtx, l) }() // ends with the bench
	scannerURL := "http://" + l.Addr().String()
	results, err := createPodsAndReports(ctx, kube, hub, policies, n, namespaces)
	if err != nil {
		return err
	}
	hub.SetReady()
	fmt.Printf("created %d Pods and %d BackgroundScanReports (%d results, handed over on %s) in %d namespaces in %s\n",
		n, n, results, scannerURL, namespaces, time.Since(start).Round(time.Millisecond))

	if bin == "" {
		bin = filepath.Join(os.TempDir(), "tally-merger-bench")
		build := exec.Command("go", "build", "-o", bin, "./cmd/tally-merger")
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build tally-merger: %w", err)
		}
	}

	// 1. From start to every final report written.
	m, err := startMerger(bin, c.Kubeconfig, scannerURL)
	if err != nil {
		return err
	}
	if err := m.waitWrites(float64(n), 20*time.Minute); err != nil {
		m.stop()
		return fmt.Errorf("%w (merger log: %s)", err, m.Log)
	}
	full := time.Since(m.Started)
	writes, _ := m.Value(metricWrites)
	rss := benchutil.PeakRSS(m.Cmd.Process.Pid)
	count, err := countFinal(ctx, dyn)
	if err != nil {
		m.stop()
		return err
	}
	fmt.Printf("first run: %s from start to all reports written; %d PolicyReports; %.0f API writes; merger peak RSS %.1f MiB\n",
		full.Round(time.Millisecond), count, writes, float64(rss)/1024)
	if out := os.Getenv("MERGEBENCH_HEAP"); out != "" {
		if err := benchutil.Fetch(m.Base+"/debug/pprof/heap", out); err != nil {
			m.stop()
			return err
		}
	}
	m.stop()

	// 2. Restart with nothing changed: every report is read back, none written.
	m, err = startMerger(bin, c.Kubeconfig, scannerURL)
	if err != nil {
		return err
	}
	defer m.stop()
	if err := m.waitReady(10 * time.Minute); err != nil {
		return fmt.Errorf("%w (merger log: %s)", err, m.Log)
	}
	ready := time.Since(m.Started)
	writes, _ = m.Value(metricWrites)
	fmt.Printf("restart, nothing changed: %s to ready; %.0f API writes; merger peak RSS %.1f MiB\n",
		ready.Round(time.Millisecond), writes, float64(benchutil.PeakRSS(m.Cmd.Process.Pid))/1024)
	return nil
}

// compiled is a policy installed in the cluster and its compiled form.
type compiled struct {
	name   string
	policy *engine.Policy
}

func installPolicies(ctx context.Context, dyn dynamic.Interface, dir string) ([]compiled, error) {
	docs, err := pss.Read(dir)
	if err != nil {
		return nil, err
	}
	out := make([]compiled, 0, len(docs))
	for _, obj := range docs {
		p, err := pss.Compile(obj)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(apiresources.ClusterPolicy).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("ClusterPolicy %s: %w", u.GetName(), err)
		}
		out = append(out, compiled{name: u.GetName(), policy: p})
	}
	return out, nil
}

// createPodsAndReports creates the Pods and, for each, the
// BackgroundScanReport tally-scanner would write. It returns the number of
// results written.
func createPodsAndReports(ctx context.Context, kube kubernetes.Interface, hub *handover.Hub, policies []compiled, n, namespaces int) (int64, error) {
	for i := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mbench-%02d", i)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, err
		}
	}
	var next, results atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				k, err := createOne(ctx, kube, hub, policies, i, fmt.Sprintf("mbench-%02d", i%namespaces))
				if err != nil {
					errs <- err
					return
				}
				results.Add(int64(k))
			}
		}()
	}
	wg.Wait()
	close(errs)
	return results.Load(), <-errs
}

func createOne(ctx context.Context, kube kubernetes.Interface, hub *handover.Hub, policies []compiled, i int, ns string) (int, error) {
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, benchPod(i), metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("create pod: %w", err)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return 0, err
	}
	obj["apiVersion"], obj["kind"] = "v1", "Pod"
	hash, err := report.ContentHash(obj)
	if err != nil {
		return 0, err
	}
	req := &engine.Request{Object: obj, Background: true}
	now := time.Now()
	var entries []wgv1alpha2.PolicyReportResult
	for _, p := range policies {
		for _, r := range p.policy.Evaluate(ctx, req) {
			entries = append(entries, report.Result(p.policy, r, report.ProcessBackground, now))
		}
	}
	report.Sort(entries)
	uid := string(pod.UID)
	spec, err := json.Marshal(&kyvernov2.ReportSpec{
		Owner:   metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		Results: entries,
		Summary: wgv1alpha2.SummaryOf(entries),
	})
	if err != nil {
		return 0, err
	}
	err = hub.Put(&handover.Report{APIVersion: kyvernov2.GroupVersion.String(), Kind: "BackgroundScanReport",
		Metadata: handover.Meta{Name: uid, Namespace: ns,
			Labels: map[string]string{
				report.LabelManagedBy:            report.ManagedBy,
				"audit.kyverno.io/resource.uid":  uid,
				"audit.kyverno.io/resource.hash": fmt.Sprintf("%x", hash),
				"audit.kyverno.io/resource.gvr":  "v1.pods",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
		Spec: spec})
	if err != nil {
		return 0, fmt.Errorf("hand over report: %w", err)
	}
	return len(entries), nil
}

// benchPod is hack/scanbench's Pod: one in ten is privileged, one in five runs as root.
func benchPod(i int) *corev1.Pod {
	f, t := false, true
	sc := &corev1.SecurityContext{AllowPrivilegeEscalation: &f, RunAsNonRoot: &t,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if i%10 == 0 {
		sc = &corev1.SecurityContext{Privileged: &t}
	} else if i%5 == 0 {
		sc.RunAsNonRoot = nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%100), "team": "bench"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "app", Image: fmt.Sprintf("registry.example.com/bench/app-%d:1.%d.0", i%100, i%7), SecurityContext: sc},
				{Name: "sidecar", Image: "envoyproxy/envoy:v1.30.1", SecurityContext: sc.DeepCopy()},
			},
		},
	}
}

func countFinal(ctx context.Context, dyn dynamic.Interface) (int, error) {
	total := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := dyn.Resource(apiresources.PolicyReport).List(ctx, opts)
		if err != nil {
			return 0, err
		}
		total += len(list.Items)
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return total, nil
		}
	}
}

// merger is a running tally-merger process.
type merger struct{ *benchutil.Process }

func startMerger(bin, kubeconfig, scannerURL string) (*merger, error) {
	p, err := benchutil.StartProcess(bin, "tally-merger", kubeconfig, "--scanner-url", scannerURL)
	if err != nil {
		return nil, err
	}
	return &merger{p}, nil
}

func (m *merger) stop() { m.Stop() }

// waitWrites waits until at least n reports were written and the merger is synced.
func (m *merger) waitWrites(n float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if v, err := m.Value(metricWrites); err == nil && v >= n && m.Ready() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	v, _ := m.Value(metricWrites)
	return fmt.Errorf("merger wrote %.0f of %.0f reports in %s", v, n, timeout)
}

// waitReady waits until the merger is synced (everything listed, queue drained).
func (m *merger) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if m.Ready() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("merger not ready after %s", timeout)
}
