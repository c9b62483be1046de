// Package reportsserver runs kyverno/reports-server beside the local control
// plane of e2e/cluster (started with Options.Aggregator): an etcd of its own
// and the reports-server binary, built from ../shared/third_party by
// hack/thirdparty/build.sh, as processes of this machine, reached by the API
// server through a Service whose EndpointSlice names this machine's address
// (the control plane routes aggregated APIs to endpoints: it has no
// kube-proxy). The report kinds (wgpolicyk8s.io, openreports.io,
// reports.kyverno.io) are then stored there, not in the cluster's etcd. The
// benches (hack/pipelinebench --reports-server) and the conformance suite's
// local providers (TALLY_CONFORMANCE_REPORTS_SERVER=etcd) use it; kind runs
// install reports-server with its own chart instead (e2e/kind).
package reportsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tally-dev/tally/e2e/cluster"
)

const (
	// Namespace and Service are the Service the APIServices name.
	Namespace = "reports-server"
	Service   = "reports-server"
	// Annotation is what reports-server sets on every report it serves.
	Annotation      = "kyverno.reports-server.io/served-by"
	AnnotationValue = "reports-server"
	// EtcdCommand is the name its etcd runs under (a link to the control
	// plane's etcd), so that the benches tell it from the cluster's.
	EtcdCommand = "rs-etcd"
	// Command is reports-server's process name.
	Command = "reports-server"
)

// APIServices are the APIServices reports-server registers.
var APIServices = []string{"v1alpha2.wgpolicyk8s.io", "v1alpha1.openreports.io", "v1.reports.kyverno.io"}

// Server is a running reports-server and its etcd.
type Server struct {
	Etcd, Server *Process
	// Dir holds the etcd data, certificates and the two logs.
	Dir string
}

// Process is a running command; Done is closed when it has exited.
type Process struct {
	Cmd  *exec.Cmd
	Done chan struct{}
}

// Build builds reports-server (hack/thirdparty/build.sh, cached) and
// returns its binary.
func Build(ctx context.Context) (string, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", "hack/thirdparty/build.sh", "reports-server")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/thirdparty/build.sh reports-server: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin", Command), nil
}

// Start runs reports-server for the local cluster c, storing the reports in
// an etcd of its own, with its files and logs in dir; it returns once the
// API server serves the report APIs through it.
func Start(ctx context.Context, c *cluster.Cluster, dir string) (_ *Server, err error) {
	if !c.Local {
		return nil, errors.New("reports-server runs beside a local control plane only")
	}
	bin, err := Build(ctx)
	if err != nil {
		return nil, err
	}
	assets, err := cluster.Assets(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	etcdBin := filepath.Join(dir, "bin", EtcdCommand)
	_ = os.Remove(etcdBin)
	if err := os.Symlink(filepath.Join(assets, "etcd"), etcdBin); err != nil {
		return nil, err
	}
	host, err := HostAddress()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	client, peer, secure := ports[0], ports[1], ports[2]
	s := &Server{Dir: dir}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	if s.Etcd, err = startLogged(dir, EtcdCommand, etcdBin, nil,
		"--name", "reports", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "reports="+peerURL, "--unsafe-no-fsync",
		"--quota-backend-bytes", strconv.Itoa(8<<30)); err != nil {
		return nil, err
	}

	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	if err := serviceFor(ctx, kube, host, secure); err != nil {
		return nil, err
	}
	kc := c.Kubeconfig
	// As its chart runs it: the database settings are read (and the port
	// parsed) whatever the store.
	env := []string{"POD_IP=" + host, "DB_HOST=", "DB_PORT=5432", "DB_DATABASE=reportsdb", "DB_USER=postgres", "DB_PASSWORD="}
	if s.Server, err = startLogged(dir, Command, bin, env,
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--etcd", "--etcdSkipTLS", "--etcdEndpoints", clientURL,
		"--servicename", Service, "--servicens", Namespace, "--clusterrolename", "",
		"--cert-dir", filepath.Join(dir, "certs"), "--secure-port", strconv.Itoa(secure),
		"--authorization-always-allow-paths", "/metrics,/healthz,/readyz,/livez"); err != nil {
		return nil, err
	}
	if err := waitServed(ctx, c, s, 2*time.Minute); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop ends reports-server, then its etcd.
func (s *Server) Stop() {
	for _, p := range []*Process{s.Server, s.Etcd} {
		if p == nil {
			continue
		}
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.Done:
		case <-time.After(10 * time.Second):
			_ = p.Cmd.Process.Kill()
			<-p.Done
		}
	}
}

// startLogged starts a process killed with its parent, its output in
// dir/name.log.
func startLogged(dir, name, bin string, env []string, args ...string) (*Process, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Cmd: cmd, Done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.Done) }()
	return p, nil
}

// serviceFor makes the Service the APIServices name, its one endpoint
// being this machine's address and reports-server's port (an EndpointSlice
// may not name a loopback address).
func serviceFor(ctx context.Context, kube kubernetes.Interface, host string, port int) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: Service, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(port)),
		}}},
	}
	if _, err := kube.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("Service %s/%s: %w", Namespace, Service, err)
	}
	name, proto, p, ready := "https", corev1.ProtocolTCP, int32(port), true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: Service, Namespace: Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: Service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &p}},
	}
	_ = kube.DiscoveryV1().EndpointSlices(Namespace).Delete(ctx, Service, metav1.DeleteOptions{})
	if _, err := kube.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("EndpointSlice %s/%s: %w", Namespace, Service, err)
	}
	return nil
}

// waitServed waits until every APIService reports-server registers is
// Available, while its process runs.
func waitServed(ctx context.Context, c *cluster.Cluster, s *Server, timeout time.Duration) error {
	err := WaitAvailable(ctx, c.Config, timeout, func() error {
		select {
		case <-s.Server.Done:
			return fmt.Errorf("reports-server exited: %s", s.Server.Cmd.ProcessState)
		default:
			return nil
		}
	})
	if err == nil {
		err = waitAuthenticated(ctx, c.Config, timeout)
	}
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.Dir, Command+".log"))
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		return fmt.Errorf("%w; the end of its log:\n%s", err, log)
	}
	return nil
}

// waitAuthenticated waits until reports-server knows the API server's
// callers: an APIService is Available before reports-server has read the
// front proxy's CA (the extension-apiserver-authentication ConfigMap), and
// until then it takes every request for system:anonymous's and forbids it.
func waitAuthenticated(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	polr := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, last = dyn.Resource(polr).Namespace(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		return !apierrors.IsForbidden(last), nil
	})
	if err != nil {
		return fmt.Errorf("reports-server did not authenticate the API server's requests: %v", last)
	}
	return nil
}

// WaitAvailable waits until each of APIServices names reports-server's
// Service and is Available; alive, when set, ends the wait with its error
// (the server is gone).
func WaitAvailable(ctx context.Context, cfg *rest.Config, timeout time.Duration, alive func() error) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	var missing string
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if alive != nil {
			if err := alive(); err != nil {
				return false, err
			}
		}
		for _, name := range APIServices {
			u, err := dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				missing = fmt.Sprintf("APIService %s: %v", name, err)
				return false, nil
			}
			if svc, _, _ := unstructured.NestedString(u.Object, "spec", "service", "name"); svc != Service {
				missing = fmt.Sprintf("APIService %s is not reports-server's yet", name)
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			ok := false
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Available" && m["status"] == "True" {
					ok = true
				}
			}
			if !ok {
				missing = fmt.Sprintf("APIService %s not Available: %v", name, conds)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("reports-server not serving after %s: %s: %w", timeout, missing, err)
	}
	return nil
}

// HostAddress is an IPv4 address of this machine that is not a loopback
// one.
func HostAddress() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if ok && ipnet.IP.To4() != nil && !ipnet.IP.IsLoopback() && !ipnet.IP.IsLinkLocalUnicast() {
			return ipnet.IP.String(), nil
		}
	}
	return "", errors.New("no IPv4 address other than loopback: reports-server cannot be reached by the API server")
}

// freePorts finds n free TCP ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
