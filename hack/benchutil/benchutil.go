// Package benchutil holds what tally's bench commands (hack/scanbench,
// hack/mergebench, hack/pipelinebench) share: the benchmark Pods, the CPU of
// processes, reading a process's peak memory and a daemon's
// metrics and readiness, free loopback addresses, saving profiles.
package benchutil

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tally-dev/tally/e2e/cluster"
)

// PeakRSS reads a process's peak resident set (VmHWM) in KiB, 0 if unknown.
func PeakRSS(pid int) int { return statusKiB(pid, "VmHWM:") }

// AnonRSS reads the anonymous part of a process's resident set (RssAnon:
// its heap and stacks, without the pages of its binary and libraries) in
// KiB, 0 if unknown. The kernel keeps no peak of it: sample it.
func AnonRSS(pid int) int { return statusKiB(pid, "RssAnon:") }

func statusKiB(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return kb
		}
	}
	return 0
}

// FreeAddr returns a loopback address nothing listens on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Fetch saves what a URL serves (a pprof profile) into a file.
func Fetch(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// Daemon reaches the /metrics and /readyz of a tally process.
type Daemon struct {
	// Base is "http://host:port".
	Base string
}

// Value sums the samples of a metric.
func (d Daemon) Value(name string) (float64, error) {
	resp, err := http.Get(d.Base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// Ready reports whether /readyz answers 200.
func (d Daemon) Ready() bool {
	resp, err := http.Get(d.Base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func CreatePods(ctx context.Context, kube kubernetes.Interface, pods, namespaces int) error {
	return CreatePodsWith(ctx, kube, pods, namespaces, nil)
}

// CreatePodsWith is CreatePods with each BenchPod changed by edit (nil: none).
func CreatePodsWith(ctx context.Context, kube kubernetes.Interface, pods, namespaces int, edit func(i int, p *corev1.Pod)) error {
	for i := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%02d", i)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= pods {
					return
				}
				pod := BenchPod(i)
				if edit != nil {
					edit(i, pod)
				}
				if _, err := kube.CoreV1().Pods(fmt.Sprintf("bench-%02d", i%namespaces)).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// BenchPod is a realistic Pod; one in ten is privileged, one in five runs as root.
func BenchPod(i int) *corev1.Pod {
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
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%100), "team": "bench"},
			Annotations: map[string]string{"prometheus.io/scrape": "true"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "app", Image: fmt.Sprintf("registry.example.com/bench/app-%d:1.%d.0", i%100, i%7), SecurityContext: sc,
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}}},
				{Name: "sidecar", Image: "envoyproxy/envoy:v1.30.1", SecurityContext: sc.DeepCopy()},
			},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// ChildCPU sums the CPU seconds (user+system) of this process's children by
// command name: the control plane it started.
func ChildCPU() map[string]float64 {
	out := map[string]float64{}
	me := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, ppid, cpu, ok := ProcStat(pid)
		if ok && ppid == me {
			out[comm] += cpu
		}
	}
	return out
}

func ProcessCPU(pid int) float64 {
	_, _, cpu, _ := ProcStat(pid)
	return cpu
}

// ProcStat reads a process's command, parent and CPU seconds from /proc.
func ProcStat(pid int) (comm string, ppid int, cpu float64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, 0, false
	}
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, 0, false
	}
	comm = s[open+1 : closing]
	f := strings.Fields(s[closing+1:])
	if len(f) < 13 {
		return "", 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return comm, ppid, (utime + stime) / 100, true // USER_HZ is 100 on Linux
}

// Process is a tally daemon a bench started: its metrics, command and log.
type Process struct {
	Daemon
	Cmd     *exec.Cmd
	Log     string
	Started time.Time
}

// StartProcess starts a tally daemon (scanner or merger) on a cluster as the
// benches run it: no leader election, metrics and pprof on a free loopback
// address, a generous client rate limit, its output in a temporary log.
func StartProcess(bin, name, kubeconfig string, extra ...string) (*Process, error) {
	return StartProcessEnv(bin, name, kubeconfig, nil, extra...)
}

// StartProcessEnv is StartProcess with env added to the process's
// environment (GOMEMLIMIT, as the chart sets it), and to its alone.
func StartProcessEnv(bin, name, kubeconfig string, env []string, extra ...string) (*Process, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp("", name+"-bench-*.log")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", kubeconfig, "--leader-elect=false", "--namespace", "default",
		"--listen", addr, "--profiling", "--kube-api-qps", "500", "--kube-api-burst", "1000"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	p := &Process{Daemon: Daemon{Base: "http://" + addr}, Cmd: cmd, Log: logf.Name(), Started: time.Now()}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	logf.Close() // the child holds its own descriptor
	return p, nil
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 s).
func (p *Process) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-done
	}
}

// APIServerMetrics reads the API server's metrics, by family.
func APIServerMetrics(ctx context.Context, kube kubernetes.Interface) (map[string]*dto.MetricFamily, error) {
	data, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	return families, nil
}

// Labels are a metric's labels by name.
func Labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// Sample is a counter's, gauge's or untyped metric's value.
func Sample(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// APIServerLiveHeap forces a garbage collection in the API server (its
// /debug/pprof/heap?gc=1) and reads its heap in use after it
// (go_memstats_heap_alloc_bytes): what it keeps, apart from garbage.
func APIServerLiveHeap(ctx context.Context, kube kubernetes.Interface) (float64, error) {
	if _, err := kube.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
		return 0, err
	}
	families, err := APIServerMetrics(ctx, kube)
	if err != nil {
		return 0, err
	}
	fam, ok := families["go_memstats_heap_alloc_bytes"]
	if !ok || len(fam.GetMetric()) == 0 {
		return 0, fmt.Errorf("no go_memstats_heap_alloc_bytes in the API server's metrics")
	}
	return Sample(fam.GetMetric()[0]), nil
}

// Cluster is the local control plane a bench runs on, with tally's CRDs
// installed and its clients.
type Cluster struct {
	*cluster.Cluster
	Kube kubernetes.Interface
	Dyn  dynamic.Interface
}

// StartCluster starts the local control plane and installs the CRDs. The
// caller stops it.
func StartCluster(ctx context.Context, opts cluster.Options) (*Cluster, error) {
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &Cluster{Cluster: c}
	if err = cluster.InstallCRDs(c.Config); err == nil {
		if out.Kube, err = kubernetes.NewForConfig(c.Config); err == nil {
			out.Dyn, err = dynamic.NewForConfig(c.Config)
		}
	}
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	return out, nil
}
