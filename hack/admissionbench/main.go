// Command admissionbench measures the admission bridge's latency under
// loopback load: the bridge runs in-process against a real API server (the
// local control plane of e2e/cluster, or E2E_KUBECONFIG) with the Pod
// Security Standards policies of the corpus, its certificate generated into
// a Secret and its AdmissionReports written to the API server, while a
// client sends Pod CREATE AdmissionReviews over HTTPS at a fixed rate with
// bounded concurrency. It prints p50/p90/p99/max latencies as the client
// sees them (TLS with keep-alive, JSON both ways) and the reports written.
//
//	TALLY_CONTROLPLANE_ASSETS=$(bash hack/controlplane/build.sh) go run ./hack/admissionbench --rate 200 --duration 30s
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/hack/admissionbench/workload"
	"github.com/tally-dev/tally/internal/pss"
)

const namespace = "adm-bench"

func main() {
	rate := flag.Int("rate", 200, "requests per second")
	duration := flag.Duration("duration", 30*time.Second, "how long to send")
	concurrency := flag.Int("concurrency", 16, "requests in flight at most")
	corpus := flag.String("corpus", "../shared/corpus", "the corpus holding policy-library/pod-security")
	flag.Parse()
	if err := run(*rate, *duration, *concurrency, *corpus); err != nil {
		fmt.Fprintln(os.Stderr, "admissionbench:", err)
		os.Exit(1)
	}
}

func run(rate int, duration time.Duration, concurrency int, corpus string) error {
	ctx := context.Background()
	policies, err := pss.Read(filepath.Join(corpus, "policy-library", "pod-security"))
	if err != nil {
		return err
	}
	c, err := cluster.Start(ctx, cluster.Options{NoControllerManager: true})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := cluster.InstallCRDs(c.Config); err != nil {
		return err
	}
	cfg := c.Config
	cfg.QPS, cfg.Burst = 100, 200 // tally-scanner's defaults
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	gvr := apiresources.ClusterPolicy
	for _, p := range policies {
		if _, err := dyn.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: p}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("policy %v: %w", p["metadata"], err)
		}
	}
	fmt.Printf("installed %d Pod Security Standards policies\n", len(policies))

	reg := prometheus.NewRegistry()
	bridge := admission.New(dyn, kube, memory.NewMemCacheClient(disc), admission.Options{
		Listen: "127.0.0.1:0", SecretNamespace: "default", SecretName: "tally-webhook-tls", Registry: reg,
	})
	bctx, cancel := context.WithCancel(logr.NewContext(ctx, logr.Discard()))
	done := make(chan error, 1)
	go func() { done <- bridge.Run(bctx) }()
	defer func() { cancel(); <-done }()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return bridge.Addr() != "", nil
	}); err != nil {
		return fmt.Errorf("bridge did not start serving: %w", err)
	}
	sec, err := kube.CoreV1().Secrets("default").Get(ctx, "tally-webhook-tls", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		return fmt.Errorf("no CA in the webhook Secret")
	}
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: concurrency,
	}}
	url := "https://" + bridge.Addr() + "/validate"

	total := int(duration.Seconds() * float64(rate))
	reviews := make([][]byte, total)
	for i := range reviews {
		reviews[i] = workload.PodReview(i, namespace)
	}
	// Warm up (connections, caches) with requests outside the measurement.
	warmAllowed := 0
	for i := range concurrency {
		ok, _, err := send(client, url, workload.PodReview(total+i, namespace))
		if err != nil {
			return err
		}
		if ok {
			warmAllowed++
		}
	}

	latencies := make([]time.Duration, total)
	var allowed, denied, failed atomic.Int64
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	late := 0
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		select {
		case sem <- struct{}{}:
		default:
			late++ // concurrency bound reached: wait for a slot (open loop no longer)
			sem <- struct{}{}
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			ok, _, err := send(client, url, reviews[i])
			latencies[i] = time.Since(t0)
			switch {
			case err != nil:
				failed.Add(1)
			case ok:
				allowed.Add(1)
			default:
				denied.Add(1)
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	q := func(p float64) time.Duration { return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))] }
	fmt.Printf("sent %d reviews in %s (%.0f/s), concurrency bound %d (reached %d times)\n", total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), concurrency, late)
	fmt.Printf("allowed %d, denied %d, failed %d\n", allowed.Load(), denied.Load(), failed.Load())
	fmt.Printf("latency p50 %s  p90 %s  p99 %s  max %s\n", q(0.50).Round(time.Microsecond), q(0.90).Round(time.Microsecond), q(0.99).Round(time.Microsecond), latencies[len(latencies)-1].Round(time.Microsecond))

	// Let the last flush land, then count the reports: one per admitted Pod.
	want := int(allowed.Load()) + warmAllowed
	var n int
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dyn.Resource(apiresources.AdmissionReport).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n = len(list.Items)
		return n >= want, nil
	})
	fmt.Printf("AdmissionReports written: %d (admitted Pods incl. warm-up: %d)\n", n, want)
	if failed.Load() > 0 {
		return fmt.Errorf("%d requests failed", failed.Load())
	}
	return nil
}

// send posts one review and reads whether it was allowed.
func send(client *http.Client, url string, body []byte) (allowed bool, latency time.Duration, err error) {
	t0 := time.Now()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, 0, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var review struct {
		Response struct {
			Allowed bool `json:"allowed"`
		} `json:"response"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		return false, 0, err
	}
	return review.Response.Allowed, time.Since(t0), nil
}
