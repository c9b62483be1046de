// Command scanbench measures tally-scanner against a real API server: N Pods
// over M namespaces with the Pod Security Standards policies of the corpus.
// It reports the time from start to all reports written, the scanner's peak
// RSS, the reports it handed over (on loopback, read back by the bench as
// the merger reads them), then a forced full rescan with nothing changed (0
// expected) and one policy edited.
//
//	go run ./hack/scanbench --pods 10000 --namespaces 50
//
// The cluster is the local control plane of e2e/cluster (or E2E_KUBECONFIG).
// The scanner runs as its own process (built from ./cmd/tally-scanner), so
// its RSS is its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/hack/benchutil"
	"github.com/tally-dev/tally/internal/pss"
)

func main() {
	pods := flag.Int("pods", 1000, "Pods to create")
	namespaces := flag.Int("namespaces", 50, "namespaces to spread them over")
	corpus := flag.String("corpus", "../shared/corpus", "the corpus holding policy-library/pod-security")
	flag.StringVar(&policySet, "policy-set", "pod-security", "the policy-library folder of the policies: pod-security (classic), pod-security-cel (validate.cel) or pod-security-vpol (ValidatingPolicies)")
	flag.BoolVar(&contextPolicies, "context-policies", false, "also install two ClusterPolicies that read the cluster: an apiCall of each Pod's namespace and a ConfigMap")
	flag.StringVar(&scannerBin, "scanner-bin", "", "a prebuilt tally-scanner (default: build ./cmd/tally-scanner)")
	flag.IntVar(&workers, "workers", 0, "the scanner's --workers (0: its default)")
	flag.IntVar(&signedImages, "signed-images", 0, "serve this many signed images from a registry of the bench's own, give each Pod's app container one of them, and add a ClusterPolicy verifying them (R43: registry requests per distinct image)")
	flag.BoolVar(&imagePolicy, "ivpol", false, "with --signed-images, verify them with an ImageValidatingPolicy (the Pods name them by digest) instead of a verifyImages rule (R42)")
	flag.BoolVar(&registryDown, "registry-down", false, "with --signed-images, stop the registry before the scanner starts: every image result is an error, the other results must come on time")
	flag.DurationVar(&idle, "idle", 0, "after the full scan, measure the scanner's CPU over this long with nothing changing (SCANBENCH_IDLECPU=file: a CPU profile of it)")
	flag.Parse()
	if err := run(*pods, *namespaces, *corpus); err != nil {
		fmt.Fprintln(os.Stderr, "scanbench:", err)
		os.Exit(1)
	}
}

var (
	scannerBin string
	workers    int
	policySet  string
	// contextPolicies adds the policies of contextPolicyManifests.
	contextPolicies bool
	idle            time.Duration
	signedImages    int
	registryDown    bool
	imagePolicy     bool
)

func run(pods, namespaces int, corpus string) error {
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

	start := time.Now()
	var images *imageFixture
	var editPod func(int, *corev1.Pod)
	if signedImages > 0 {
		if images, err = startImages(signedImages, imagePolicy); err != nil {
			return err
		}
		defer images.registry.Stop()
		editPod = func(i int, p *corev1.Pod) { p.Spec.Containers[0].Image = images.image(i) }
	}
	if err := benchutil.CreatePodsWith(ctx, kube, pods, namespaces, editPod); err != nil {
		return err
	}
	fmt.Printf("created %d pods in %d namespaces in %s\n", pods, namespaces, time.Since(start).Round(time.Millisecond))
	policies, err := installPolicies(ctx, dyn, filepath.Join(corpus, "policy-library", policySet))
	if err != nil {
		return err
	}
	fmt.Printf("installed %d Pod Security Standards policies (%s)\n", len(policies), policySet)
	if contextPolicies {
		if err := installContextPolicies(ctx, dyn); err != nil {
			return err
		}
		fmt.Println("installed 2 policies that read the cluster (an apiCall per Pod namespace, a ConfigMap)")
	}

	if images != nil {
		if err := images.installPolicy(ctx, dyn); err != nil {
			return err
		}
		kind := "verifyImages"
		if imagePolicy {
			kind = "ImageValidatingPolicy"
		}
		fmt.Printf("installed a %s policy over %d signed images (registry %s)\n", kind, signedImages, images.registry.Host)
		if registryDown {
			images.registry.Stop()
			fmt.Println("registry stopped: every image result must be an error")
		}
	}

	bin := scannerBin
	if bin == "" {
		bin = filepath.Join(os.TempDir(), "tally-scanner-bench")
		build := exec.Command("go", "build", "-o", bin, "./cmd/tally-scanner")
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build tally-scanner: %w", err)
		}
	}
	cpuBefore := benchutil.ChildCPU()
	reqBefore, err := reportRequests(ctx, kube)
	if err != nil {
		return err
	}
	addr, err := benchutil.FreeAddr()
	if err != nil {
		return err
	}
	logf, err := os.CreateTemp("", "tally-scanner-bench-*.log")
	if err != nil {
		return err
	}
	defer logf.Close()
	handoverAddr, err := benchutil.FreeAddr()
	if err != nil {
		return err
	}
	// The reports are handed over on loopback; the bench reads them there.
	hub, err := dynamic.NewForConfig(&rest.Config{Host: "http://" + handoverAddr})
	if err != nil {
		return err
	}
	scanner := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "--sharding=false", "--leader-elect=false", "--namespace", "default",
		"--listen", addr, "--handover-listen", handoverAddr, "--rescan-endpoint", "--profiling", "--kube-api-qps", "500", "--kube-api-burst", "1000")
	if workers > 0 {
		scanner.Args = append(scanner.Args, "--workers", strconv.Itoa(workers))
	}
	scanner.Stdout, scanner.Stderr = logf, logf
	t0 := time.Now()
	if err := scanner.Start(); err != nil {
		return err
	}
	defer func() { _ = scanner.Process.Kill(); _ = scanner.Wait() }()
	m := &metricsClient{benchutil.Daemon{Base: "http://" + addr}}
	if out := os.Getenv("SCANBENCH_APICPU"); out != "" {
		// A CPU profile of the API server during 30 s of the full scan.
		go func() {
			data, err := kube.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "30").DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(out, data, 0o644)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "API server cpu profile:", err)
			}
		}()
	}
	if out := os.Getenv("SCANBENCH_CPU"); out != "" {
		// A CPU profile of the scanner's first 30 s (the full scan).
		go func() {
			for !m.Ready() && time.Since(t0) < 10*time.Second {
				if resp, err := http.Get(m.Base + "/healthz"); err == nil {
					resp.Body.Close()
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err := benchutil.Fetch(m.Base+"/debug/pprof/profile?seconds=30", out); err != nil {
				fmt.Fprintln(os.Stderr, "cpu profile:", err)
			}
		}()
	}

	// 1. Full scan from start.
	if err := m.waitSynced(float64(pods), 15*time.Minute+time.Duration(pods)*30*time.Millisecond); err != nil {
		return fmt.Errorf("%w (scanner log: %s)", err, logf.Name())
	}
	full := time.Since(t0)
	writes, _ := m.Value("tally_scan_report_writes_total")
	reports, err := countReports(ctx, hub)
	if err != nil {
		return err
	}
	rss := benchutil.PeakRSS(scanner.Process.Pid)
	fmt.Printf("full scan: %s to all reports written; %d reports; %.0f handed over; scanner peak RSS %.1f MiB\n",
		full.Round(time.Millisecond), reports, writes, float64(rss)/1024)
	cpuAfter := benchutil.ChildCPU()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		fmt.Printf("  CPU during the full scan: %s %.1f s\n", name, cpuAfter[name]-cpuBefore[name])
	}
	fmt.Printf("  CPU of the scanner process: %.1f s\n", benchutil.ProcessCPU(scanner.Process.Pid))
	if images != nil {
		reqs, _ := m.Value("tally_image_registry_requests_total")
		verified, _ := m.Value("tally_image_verifications_total")
		fmt.Printf("  image verification: %.0f registry requests (%.1f per distinct image), %.0f verifications, for %d Pods over %d images\n",
			reqs, reqs/float64(signedImages), verified, pods, signedImages)
		if err := images.countResults(m); err != nil {
			return err
		}
	}
	if contextPolicies {
		n, _ := m.Value("tally_data_requests_total")
		fmt.Printf("  API requests for the data policies read: %.0f (%d namespaces, 1 ConfigMap list)\n", n, namespaces)
	}
	if reqAfter, err := reportRequests(ctx, kube); err == nil {
		for verb, n := range reqAfter {
			if d := n - reqBefore[verb]; d > 0 {
				fmt.Printf("  API server requests on background reports: %s %.0f\n", verb, d)
			}
		}
	}
	if out := os.Getenv("SCANBENCH_HEAP"); out != "" {
		if err := benchutil.Fetch(m.Base+"/debug/pprof/heap", out); err != nil {
			return err
		}
	}

	// 1b. Nothing changes: what the scanner spends idle.
	if idle > 0 {
		writesBefore, _ := m.Value("tally_scan_report_writes_total")
		cpu0 := benchutil.ProcessCPU(scanner.Process.Pid)
		api0 := benchutil.ChildCPU()
		if out := os.Getenv("SCANBENCH_IDLECPU"); out != "" {
			if err := benchutil.Fetch(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", m.Base, int(idle.Seconds())), out); err != nil {
				return err
			}
		} else {
			time.Sleep(idle)
		}
		api1 := benchutil.ChildCPU()
		writesAfter, _ := m.Value("tally_scan_report_writes_total")
		fmt.Printf("idle %s: scanner CPU %.2f s, kube-apiserver %.2f s, etcd %.2f s; %.0f handed over\n", idle,
			benchutil.ProcessCPU(scanner.Process.Pid)-cpu0, api1["kube-apiserver"]-api0["kube-apiserver"], api1["etcd"]-api0["etcd"], writesAfter-writesBefore)
	}

	// 2. Forced full rescan with nothing changed.
	before, _ := m.Value("tally_scan_report_writes_total")
	evalBefore, _ := m.Value("tally_scan_resources_processed_total")
	t1 := time.Now()
	resp, err := http.Post(m.Base+"/rescan", "text/plain", nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rescan := time.Since(t1)
	after, _ := m.Value("tally_scan_report_writes_total")
	evalAfter, _ := m.Value("tally_scan_resources_processed_total")
	fmt.Printf("forced full rescan, nothing changed: %s; %.0f resources evaluated; %.0f handed over\n",
		rescan.Round(time.Millisecond), evalAfter-evalBefore, after-before)
	if images != nil {
		reqs, _ := m.Value("tally_image_registry_requests_total")
		fmt.Printf("  registry requests so far: %.0f (the rescan's come from the verification cache)\n", reqs)
	}

	// 3. One policy edited: its first rule's message changes, so the rule is
	// re-evaluated wherever it can apply, and failures' messages change.
	target := policies[0]
	before = after
	t2 := time.Now()
	if err := editPolicy(ctx, dyn, target); err != nil {
		return err
	}
	if err := m.waitSettled(evalAfter, 5*time.Minute); err != nil {
		return err
	}
	edit := time.Since(t2)
	after, _ = m.Value("tally_scan_report_writes_total")
	evalEdit, _ := m.Value("tally_scan_resources_processed_total")
	fmt.Printf("one policy (%s) edited: %s to settle; %.0f resources evaluated; %.0f handed over; scanner peak RSS %.1f MiB\n",
		target, edit.Round(time.Millisecond), evalEdit-evalAfter, after-before, float64(benchutil.PeakRSS(scanner.Process.Pid))/1024)
	return nil
}

var gvrClusterPolicy = apiresources.ClusterPolicy

// policyGVR is the resource of the benchmark's policies.
func policyGVR() schema.GroupVersionResource {
	if policySet == "pod-security-vpol" {
		return apiresources.ValidatingPolicy
	}
	return gvrClusterPolicy
}

func installPolicies(ctx context.Context, dyn dynamic.Interface, dir string) ([]string, error) {
	docs, err := pss.Read(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(docs))
	for _, obj := range docs {
		u := &unstructured.Unstructured{Object: obj}
		gvr := policyGVR()
		if gv, err := schema.ParseGroupVersion(u.GetAPIVersion()); err == nil && gv.Group == gvr.Group {
			gvr.Version = gv.Version // created in the version the manifest is written in
		}
		if _, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	return names, nil
}

func editPolicy(ctx context.Context, dyn dynamic.Interface, name string) error {
	u, err := dyn.Resource(policyGVR()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if policySet == "pod-security-vpol" {
		// A ValidatingPolicy is edited in its first validation's message.
		vals, _, _ := unstructured.NestedSlice(u.Object, "spec", "validations")
		if len(vals) == 0 {
			return errors.New("policy has no validations")
		}
		v := vals[0].(map[string]any)
		msg, _ := v["message"].(string)
		v["message"] = msg + " (edited)"
		if err := unstructured.SetNestedSlice(u.Object, vals, "spec", "validations"); err != nil {
			return err
		}
		_, err = dyn.Resource(policyGVR()).Update(ctx, u, metav1.UpdateOptions{})
		return err
	}
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
	if len(rules) == 0 {
		return errors.New("policy has no rules")
	}
	r := rules[0].(map[string]any)
	v, _ := r["validate"].(map[string]any)
	msg, _ := v["message"].(string)
	v["message"] = msg + " (edited)"
	if err := unstructured.SetNestedSlice(u.Object, rules, "spec", "rules"); err != nil {
		return err
	}
	_, err = dyn.Resource(policyGVR()).Update(ctx, u, metav1.UpdateOptions{})
	return err
}

func countReports(ctx context.Context, dyn dynamic.Interface) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := dyn.Resource(apiresources.BackgroundScanReport).List(ctx, opts)
		if err != nil {
			return 0, err
		}
		n += len(list.Items)
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return n, nil
		}
	}
}

type metricsClient struct{ benchutil.Daemon }

// waitSynced waits until at least n resources were evaluated and the scanner is synced.
func (m *metricsClient) waitSynced(n float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if v, err := m.Value("tally_scan_resources_processed_total"); err == nil && v >= n && m.Ready() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("scanner not synced after %s", timeout)
}

// waitSettled waits until evaluations grew past before, the scanner is
// synced, and nothing changed for a second.
func (m *metricsClient) waitSettled(before float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := before, time.Now()
	for time.Now().Before(deadline) {
		v, err := m.Value("tally_scan_resources_processed_total")
		if err == nil && v != last {
			last, since = v, time.Now()
		}
		if last > before && m.Ready() && time.Since(since) > time.Second {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("scanner did not settle after %s", timeout)
}

// reportRequests reads the API server's apiserver_request_total for the
// background reports, by verb.
func reportRequests(ctx context.Context, kube kubernetes.Interface) (map[string]float64, error) {
	data, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("API server metrics: %w", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="backgroundscanreports"`) {
			continue
		}
		i := strings.Index(line, `verb="`)
		if i < 0 {
			continue
		}
		verb := line[i+6:]
		verb = verb[:strings.IndexByte(verb, '"')]
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			out[verb] += v
		}
	}
	return out, nil
}

// contextPolicyManifests read the cluster: one apiCall per Pod namespace
// (the same URL for every Pod of a namespace) and one ConfigMap.
const contextPolicyManifests = `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: bench-namespace-known}
spec:
  background: true
  rules:
  - name: namespace-known
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: nsname
      apiCall: {urlPath: "/api/v1/namespaces/{{ request.namespace }}", jmesPath: "metadata.name"}
    validate:
      message: "the namespace {{ request.namespace }} is not known"
      deny: {conditions: {any: [{key: "{{ nsname }}", operator: NotEquals, value: "{{ request.namespace }}"}]}}
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: bench-allowed-registry}
spec:
  background: true
  rules:
  - name: allowed-registry
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: settings
      configMap: {name: bench-settings, namespace: default}
    validate:
      message: "images must not come from {{ settings.data.denied }}"
      deny: {conditions: {any: [{key: "{{ request.object.spec.containers[0].image }}", operator: Equals, value: "{{ settings.data.denied }}"}]}}
`

func installContextPolicies(ctx context.Context, dyn dynamic.Interface) error {
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "bench-settings", "namespace": "default"}, "data": map[string]any{"denied": "evil.example/app:1"}}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ConfigMap bench-settings: %w", err)
	}
	for _, doc := range strings.Split(contextPolicyManifests, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: obj}
		gvr := schema.GroupVersionResource{Group: "kyverno.io", Version: "v1", Resource: "clusterpolicies"}
		if _, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("ClusterPolicy %s: %w", u.GetName(), err)
		}
	}
	return nil
}
