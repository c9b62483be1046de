package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/tally-dev/tally/conformance"
	"github.com/tally-dev/tally/e2e/kind"
	"github.com/tally-dev/tally/e2e/reportsserver"
)

// startKind creates the kind cluster of kind-config.yaml through
// e2e-framework's kind support, with tally installed by its Helm chart
// (standalone, the webhook authenticating the API server; see e2e/kind), and
// returns it as a provider; stop deletes the cluster.
func startKind(ctx context.Context) (conformance.Provider, func() error, error) {
	kubeconfig, stop, err := kind.Start(ctx, kind.ClusterName())
	if err != nil {
		return nil, nil, err
	}
	d, err := conformance.NewDeployed(ctx, "kind", kubeconfig)
	if err != nil {
		_ = stop() // best effort: the setup error is the one to report
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(d.Config())
	if err != nil {
		_ = stop() // best effort: the setup error is the one to report
		return nil, nil, err
	}
	registry, err := startRegistry(ctx, kube)
	if err != nil {
		_ = stop() // best effort: the setup error is the one to report
		return nil, nil, err
	}
	store, _ := kind.ReportsServerStore() // checked by Start
	if store != "" {
		d.Rename("kind, reports in reports-server (" + store + ")")
	}
	return &Kind{Deployed: d, cluster: kind.ClusterName(), kube: kube, registry: registry, reportsServer: store}, stop, nil
}

// Kind is tally deployed on a kind cluster by e2e/kind: a Deployed provider
// (restarts and failovers delete Pods) that also reaches into the cluster
// as its operator can: the scanner's webhook and the components' metrics
// through the API server (a port-forward, the Pod proxy), and the API
// server's own restart through the node's container runtime.
type Kind struct {
	*conformance.Deployed
	cluster string
	kube    kubernetes.Interface
	// registry is the address of the suite's image registry in the cluster.
	registry string
	// reportsServer is the store of the reports-server the reports are
	// kept in (kind.ReportsServerEnv), or "".
	reportsServer string
}

// StoredBy is the annotation reports-server sets on the reports it serves,
// when the run installed it.
func (k *Kind) StoredBy() (string, string) {
	if k.reportsServer == "" {
		return "", ""
	}
	return reportsserver.Annotation, reportsserver.AnnotationValue
}

// Can adds to a Deployed tally what Setup installed: tally's own webhook,
// authenticating its callers, the components' metrics and the scanner's
// rescan endpoint; and the API server's restart.
func (k *Kind) Can(what string) bool {
	switch what {
	case conformance.CanTallyWebhook, conformance.CanWebhookClientAuth, conformance.CanMetrics, conformance.CanRestartAPIServer, conformance.CanRescan:
		return true
	case conformance.CanImageRegistry:
		return k.registry != ""
	case conformance.CanTenantExceptions:
		return true // the chart's default, kind.Setup's install
	}
	return k.Deployed.Can(what)
}

// ImageRegistry is the address of the suite's image registry Pod.
func (k *Kind) ImageRegistry() string { return k.registry }

// ManagedBy is the label value of the final reports of a standalone tally.
func (k *Kind) ManagedBy() string { return "tally" }

// Restart restarts a component: the API server by stopping its container
// (the kubelet starts it again, as after a crash), the others as Deployed
// does.
func (k *Kind) Restart(ctx context.Context, component string) error {
	if component != "apiserver" {
		return k.Deployed.Restart(ctx, component)
	}
	node := k.cluster + "-control-plane"
	script := `id=$(crictl ps --name '^kube-apiserver$' -q) && [ -n "$id" ] && crictl stop --timeout 0 $id`
	if out, err := exec.CommandContext(ctx, "docker", "exec", node, "sh", "-c", script).CombinedOutput(); err != nil {
		return fmt.Errorf("restart apiserver: %w: %s", err, out)
	}
	// Down first (the stop may take a moment to be seen), then up again.
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := k.kube.CoreV1().Namespaces().Get(ctx, kind.Namespace, metav1.GetOptions{})
		return err != nil, nil
	})
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := k.kube.CoreV1().Namespaces().Get(ctx, kind.Namespace, metav1.GetOptions{})
		return err == nil, nil
	})
}

// Rescan asks the scanner holding the Lease for a full rescan (POST /rescan
// on its metrics port, which Setup turns on) through the API server's Pod
// proxy, and returns once it is done.
//
// Sharded (the chart's scanner pairs divide the namespaces), every scanner
// Pod rescans its shard.
func (k *Kind) Rescan(ctx context.Context) error {
	pods, err := k.scanningPods(ctx)
	if err != nil {
		return err
	}
	for _, pod := range pods {
		_, err = k.kube.CoreV1().RESTClient().Post().
			AbsPath("/api/v1/namespaces", kind.Namespace, "pods", pod+":8080", "proxy", "rescan").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("rescan through %s: %w", pod, err)
		}
	}
	return nil
}

// scanningPods are the Pods whose scanner scans: the Lease holder, or,
// sharded, every running Pod (each scans its shard).
func (k *Kind) scanningPods(ctx context.Context) ([]string, error) {
	if !k.Sharded(ctx) {
		leader, err := k.leaseHolder(ctx, "scanner")
		if err != nil {
			return nil, err
		}
		return []string{leader}, nil
	}
	return k.runningPods(ctx, "")
}

// runningPods are the running scanner Pods but skip.
func (k *Kind) runningPods(ctx context.Context, skip string) ([]string, error) {
	list, err := k.kube.CoreV1().Pods(kind.Namespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector("scanner")})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range list.Items {
		if p.Name != skip && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out, nil
}

// Metrics reads a component's /metrics through the API server's Pod proxy.
// The merger's are the Lease holder's (the one that merges). The scanner's
// are the sum over its ready Pods, as a Prometheus query over the
// Deployment would add them up: the Lease holder scans, but every replica
// answers the webhook. Counters, histograms and summaries add up; a gauge is
// the Lease holder's where it has the series, another Pod's otherwise.
// Sharded, every Pod scans and merges its shard: both components' metrics
// are the sum over the running Pods, gauges included (sumMetrics).
func (k *Kind) Metrics(ctx context.Context, component string) ([]byte, error) {
	if component != "scanner" && component != "merger" {
		return nil, fmt.Errorf("metrics of %s: %w", component, conformance.ErrUnsupported)
	}
	// The merger runs beside the scanner in each Pod, on port 8081; the
	// pair holds one Lease, the scanner's.
	port := "8080"
	if component == "merger" {
		port = "8081"
	}
	sharded := k.Sharded(ctx)
	var pods []string
	var leader string
	if sharded {
		running, err := k.runningPods(ctx, "")
		if err != nil {
			return nil, err
		}
		pods = running
	} else {
		var err error
		if leader, err = k.leaseHolder(ctx, "scanner"); err != nil {
			return nil, err
		}
		pods = []string{leader}
		if component == "scanner" {
			others, err := k.runningPods(ctx, leader)
			if err != nil {
				return nil, err
			}
			pods = append(pods, others...)
		}
	}
	var texts [][]byte
	for _, pod := range pods {
		text, err := k.kube.CoreV1().Pods(kind.Namespace).ProxyGet("http", pod, port, "/metrics", nil).DoRaw(ctx)
		if err != nil {
			if pod == leader {
				return nil, fmt.Errorf("metrics of %s: %w", pod, err)
			}
			continue // a replica going away: the Lease holder's (or the others') still count
		}
		texts = append(texts, text)
	}
	return sumMetrics(texts, sharded)
}

// leaseHolder is the Pod holding a component's Lease (tally-scanner, the
// pair's).
func (k *Kind) leaseHolder(ctx context.Context, component string) (string, error) {
	lease, err := k.kube.CoordinationV1().Leases(kind.Namespace).Get(ctx, "tally-"+component, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("no %s holds the Lease tally-%s", component, component)
	}
	return *lease.Spec.HolderIdentity, nil
}

// sumMetrics adds up Prometheus text expositions, the first one leading:
// see Kind.Metrics. With shards, gauges add up too (each counts its
// shard's), but for times since something, of which the largest is kept.
func sumMetrics(texts [][]byte, shards bool) ([]byte, error) {
	var families map[string]*dto.MetricFamily
	for i, text := range texts {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if i == 0 {
			families = fams
			continue
		}
		for name, fam := range fams {
			into, ok := families[name]
			if !ok {
				families[name] = fam
				continue
			}
			bySeries := map[string]*dto.Metric{}
			for _, m := range into.Metric {
				bySeries[seriesKey(m)] = m
			}
			for _, m := range fam.Metric {
				have, ok := bySeries[seriesKey(m)]
				if !ok {
					into.Metric = append(into.Metric, m)
					continue
				}
				addMetric(into.GetType(), have, m, shards, strings.Contains(name, "seconds_since"))
			}
		}
	}
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names)
	var out bytes.Buffer
	for _, name := range names {
		if _, err := expfmt.MetricFamilyToText(&out, families[name]); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), nil
}

// seriesKey identifies a series by its labels.
func seriesKey(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.GetLabel() {
		b.WriteString(l.GetName() + "=" + l.GetValue() + ",")
	}
	return b.String()
}

// addMetric adds the sample of from into into, by the family's type; a
// gauge keeps into's value, unless gauges add (the larger kept, with
// keepMax).
func addMetric(t dto.MetricType, into, from *dto.Metric, gauges, keepMax bool) {
	switch t {
	case dto.MetricType_GAUGE:
		if !gauges {
			return
		}
		v := into.GetGauge().GetValue() + from.GetGauge().GetValue()
		if keepMax {
			v = max(into.GetGauge().GetValue(), from.GetGauge().GetValue())
		}
		into.Gauge.Value = proto.Float64(v)
	case dto.MetricType_COUNTER:
		into.Counter.Value = proto.Float64(into.GetCounter().GetValue() + from.GetCounter().GetValue())
	case dto.MetricType_UNTYPED:
		into.Untyped.Value = proto.Float64(into.GetUntyped().GetValue() + from.GetUntyped().GetValue())
	case dto.MetricType_HISTOGRAM:
		h, f := into.Histogram, from.GetHistogram()
		h.SampleCount = proto.Uint64(h.GetSampleCount() + f.GetSampleCount())
		h.SampleSum = proto.Float64(h.GetSampleSum() + f.GetSampleSum())
		for i, b := range h.Bucket {
			if i < len(f.Bucket) && f.Bucket[i].GetUpperBound() == b.GetUpperBound() {
				b.CumulativeCount = proto.Uint64(b.GetCumulativeCount() + f.Bucket[i].GetCumulativeCount())
			}
		}
	case dto.MetricType_SUMMARY:
		s, f := into.Summary, from.GetSummary()
		s.SampleCount = proto.Uint64(s.GetSampleCount() + f.GetSampleCount())
		s.SampleSum = proto.Float64(s.GetSampleSum() + f.GetSampleSum())
	}
}

// ForgeReview posts a review to a scanner Pod's webhook port through a
// port-forward: a direct connection, as another Pod of the cluster makes
// one, without the API server's client certificate.
func (k *Kind) ForgeReview(ctx context.Context, review []byte) error {
	pod, err := k.readyPod(ctx, "scanner")
	if err != nil {
		return err
	}
	vwc, err := k.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, kind.WebhookConfig, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(vwc.Webhooks) == 0 || vwc.Webhooks[0].ClientConfig.Service == nil {
		return fmt.Errorf("webhook configuration %s has no service webhook", kind.WebhookConfig)
	}
	svc := vwc.Webhooks[0].ClientConfig.Service
	local, stop, err := k.portForward(ctx, pod.Name, 9443)
	if err != nil {
		return err
	}
	defer stop()
	// The certificate names the Service, as the API server dials it.
	serverName := svc.Name + "." + svc.Namespace + ".svc"
	return postReview(ctx, vwc.Webhooks[0].ClientConfig.CABundle, serverName, "https://127.0.0.1:"+strconv.Itoa(local)+"/validate", review)
}

// componentSelector selects the Pods of a component's Deployment, by the
// chart's labels.
func componentSelector(component string) string {
	return "app.kubernetes.io/name=tally,app.kubernetes.io/component=" + component
}

// readyPod is a ready Pod of a component's Deployment.
func (k *Kind) readyPod(ctx context.Context, component string) (*corev1.Pod, error) {
	pods, err := k.kube.CoreV1().Pods(kind.Namespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(component)})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && conformance.PodReady(p) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no ready %s Pod in %s", component, kind.Namespace)
}

// portForward forwards a free local port to a Pod's port until stop is
// called, and returns the local port.
func (k *Kind) portForward(ctx context.Context, pod string, port int) (int, func(), error) {
	cfg := k.Config()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return 0, nil, err
	}
	u, err := url.Parse(strings.TrimSuffix(cfg.Host, "/") + "/api/v1/namespaces/" + kind.Namespace + "/pods/" + pod + "/portforward")
	if err != nil {
		return 0, nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stopCh, readyCh, io.Discard, io.Discard)
	if err != nil {
		return 0, nil, err
	}
	errCh := make(chan error, 1)
	go func() { errCh <- fw.ForwardPorts() }()
	select {
	case <-readyCh:
	case err := <-errCh:
		return 0, nil, fmt.Errorf("port-forward to %s: %w", pod, err)
	case <-ctx.Done():
		close(stopCh)
		return 0, nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		close(stopCh)
		return 0, nil, fmt.Errorf("port-forward to %s: no local port: %v", pod, err)
	}
	stop := func() {
		close(stopCh)
		<-errCh
	}
	return int(ports[0].Local), stop, nil
}
