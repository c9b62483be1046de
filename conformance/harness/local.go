package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tally-dev/tally/conformance"
	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"

	"github.com/tally-dev/tally/report"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/e2e/kind"
	"github.com/tally-dev/tally/e2e/reportsserver"
)

// Local is the provider of `make test` and CI: the local control plane of
// e2e/cluster (kube-apiserver, etcd, kube-controller-manager), with
// tally-scanner (and its admission bridge) and the tally-merger beside it
// started as processes against it, and a ValidatingWebhookConfiguration that
// sends the requests of the cases' namespaces to the bridge on loopback.
type Local struct {
	mode LocalMode
	// webhookAuth: tally-scanner's webhook requires the client certificate
	// the local API server presents (--webhook-client-ca), as the README
	// tells cluster admins to set it up.
	webhookAuth bool
	// keepLogs leaves dir (the processes' logs) in place on Stop.
	keepLogs atomic.Bool
	// reportAPI is the API the mergers write final reports in.
	reportAPI report.API
	cluster   *cluster.Cluster
	// reports is the reports-server the report kinds are stored in, or nil.
	reports *reportsserver.Server
	kube    kubernetes.Interface
	dir     string
	bin     string

	stopping  atomic.Bool
	mu        sync.Mutex
	procs     map[string]*process // [kyverno,] scanner, merger (sharded: scanner-<i>, merger-<i>)
	ports     map[string]int
	webhookCA []byte
	// sharded: scanner pairs divide the namespaces (shards.go); pairs are
	// the live ones' indexes, nextPair the index of the next one started,
	// proxy the webhook's stand-in Service.
	sharded  bool
	pairs    []int
	nextPair int
	proxy    net.Listener
	// registry serves the suite's image fixtures on a loopback port
	// (conformance.CanImageRegistry).
	registry *sigtest.Registry
	// kyverno is the real Kyverno beside tally (LocalOptions.Kyverno), nil
	// standalone.
	kyverno *realKyverno
	// kyvernoReports runs Kyverno's reports controller instead of tally.
	kyvernoReports bool
}

// process is one tally process.
type process struct {
	name   string
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
	killed atomic.Bool // stopped on purpose: not restarted
}

const (
	localNamespace = "tally-system"
	// webhookName is the name config/webhook's RBAC lets the scanner patch.
	webhookName = "tally"
	// kyvernoWebhookName is Kyverno's resource webhook configuration.
	kyvernoWebhookName = "kyverno-resource-validating-webhook-cfg"
)

// LocalMode is how tally runs on the local control plane.
type LocalMode string

const (
	// Standalone: tally-scanner with its own admission webhook, as
	// config/overlays/standalone runs it.
	Standalone LocalMode = "standalone"
	// BesideKyverno: tally as config/overlays/beside-kyverno runs it
	// (scanner without a webhook, leaving policy status to Kyverno; the
	// merger reading Kyverno's EphemeralReports), beside the real Kyverno
	// v1.19 (kyverno.go).
	BesideKyverno LocalMode = "beside-kyverno"
)

// webhook is the name of the ValidatingWebhookConfiguration of the mode,
// and the process port it calls.
func (l *Local) webhook() (name, port string) {
	if l.mode == BesideKyverno {
		return kyvernoWebhookName, "kyverno-webhook"
	}
	if l.sharded {
		return webhookName, "webhook-proxy"
	}
	return webhookName, "scanner-webhook"
}

// processes are the mode's processes, in start order.
func (l *Local) processes() []string {
	if l.sharded {
		var out []string
		for _, i := range l.livePairs() {
			scanner, merger := pairProcesses(i)
			out = append(out, scanner, merger)
		}
		return out
	}
	if l.kyverno != nil && l.kyvernoReports {
		return []string{"kyverno-admission", "kyverno-background", "kyverno-reports"}
	}
	if l.kyverno != nil {
		return []string{"kyverno-admission", "kyverno-background", "scanner", "merger"}
	}
	return []string{"scanner", "merger"}
}

// LocalOptions are how tally runs on the local control plane.
type LocalOptions struct {
	Mode LocalMode
	// ReportAPI is the API of the final reports (default wgpolicyk8s).
	ReportAPI report.API
	// NoWebhookAuth runs tally-scanner's webhook without client
	// authentication: anyone who reaches it can send it a review.
	NoWebhookAuth bool
	// Replicas, when above 0, runs that many scanner pairs that divide the
	// namespaces (tally-scanner --sharding; standalone only).
	Replicas int
	// ReportsServer stores the report kinds in reports-server, with an
	// etcd of its own, beside the control plane (e2e/reportsserver).
	ReportsServer bool
	// Kyverno, beside Kyverno, runs the real Kyverno v1.19.0 (built from
	// the Go module proxy, hack/kyverno/build.sh) instead of the stand-in:
	// its admission and background controllers as processes (issue 55).
	Kyverno bool
	// KyvernoReports, with Kyverno, runs Kyverno's own reports controller
	// in tally's place: the reference the final reports are compared with.
	KyvernoReports bool
}

// StartLocal starts the cluster and tally. dir receives binaries and logs;
// Stop removes it (but see KeepLogs).
func StartLocal(ctx context.Context, dir string, o LocalOptions) (_ *Local, err error) {
	mode, api := o.Mode, o.ReportAPI
	if mode == "" {
		mode = Standalone
	}
	if api == "" {
		api = report.APIWGPolicy
	}
	if o.Replicas > 0 && mode != Standalone {
		return nil, fmt.Errorf("sharded scanner pairs run standalone only")
	}
	if o.Kyverno && mode != BesideKyverno {
		return nil, fmt.Errorf("the real Kyverno runs beside-kyverno only")
	}
	l := &Local{mode: mode, dir: dir, reportAPI: api, webhookAuth: !o.NoWebhookAuth, procs: map[string]*process{}, ports: map[string]int{}, sharded: o.Replicas > 0}
	defer func() {
		if err != nil {
			l.KeepLogs() // the error names a log of dir
			_ = l.Stop() // best effort: the start error is the one to report
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	l.bin = filepath.Join(dir, "bin")
	build := exec.CommandContext(ctx, "go", "build", "-tags", "faultinject", "-o", l.bin+string(os.PathSeparator), "./cmd/tally-scanner", "./cmd/tally-merger")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build tally: %w\n%s", err, out)
	}
	logs, err := os.Create(filepath.Join(dir, "controlplane.log"))
	if err != nil {
		return nil, err
	}
	if l.cluster, err = cluster.Start(ctx, cluster.Options{Logs: logs, Aggregator: o.ReportsServer}); err != nil {
		return nil, err
	}
	if err := cluster.InstallCRDs(l.cluster.Config); err != nil {
		return nil, err
	}
	if mode == BesideKyverno {
		// Beside Kyverno is beside the real one (issue 55: the stand-in that
		// imitated it is gone).
		o.Kyverno = true
	}
	if o.Kyverno {
		commands := []string{"kyverno", "background-controller"}
		if o.KyvernoReports {
			commands = append(commands, "reports-controller")
		}
		build, err := buildKyverno(ctx, root, commands...)
		if err != nil {
			return nil, err
		}
		l.kyverno = &realKyverno{build: build}
		l.kyvernoReports = o.KyvernoReports
	}
	if o.ReportsServer {
		if l.reports, err = reportsserver.Start(ctx, l.cluster, filepath.Join(dir, "reports-server")); err != nil {
			return nil, err
		}
	}
	if l.kube, err = kubernetes.NewForConfig(l.cluster.Config); err != nil {
		return nil, err
	}
	if l.registry, err = sigtest.Start("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("image registry: %w", err)
	}
	if err := conformance.PushImageFixtures(l.registry); err != nil {
		return nil, err
	}
	_, err = l.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: localNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := l.installRBAC(ctx, root); err != nil {
		return nil, err
	}
	if l.kyverno != nil {
		if err := l.installKyverno(ctx, l.kyverno); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"scanner", "scanner-webhook", "handover", "merger", "kyverno", "kyverno-webhook", "kyverno-admission", "kyverno-background", "kyverno-reports"} {
		if l.ports[name], err = freePort(); err != nil {
			return nil, err
		}
	}
	if l.sharded {
		if l.proxy, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		l.ports["webhook-proxy"] = l.proxy.Addr().(*net.TCPAddr).Port
		go l.serveWebhookProxy(l.proxy)
	}
	if l.kyverno != nil {
		// Kyverno registers its own webhooks; the policies go through its
		// policy webhook, which must answer before any is created.
		started := time.Now()
		for _, name := range l.processes() {
			if err := l.start(ctx, name); err != nil {
				return nil, err
			}
			if name == "kyverno-admission" {
				if err := l.waitKyvernoServing(ctx, started); err != nil {
					return nil, err
				}
			}
		}
		return l, nil
	}
	if err := l.createWebhookConfiguration(ctx); err != nil {
		return nil, err
	}
	if l.sharded {
		for range o.Replicas {
			if _, err := l.addPair(ctx); err != nil {
				return nil, err
			}
		}
		return l, l.waitCABundle(ctx)
	}
	for _, name := range l.processes() {
		if err := l.start(ctx, name); err != nil {
			return nil, err
		}
	}
	return l, l.waitCABundle(ctx)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (l *Local) args(name string) (binary string, args []string) {
	// The scanner and its merger run as one Pod does: one ServiceAccount.
	common := []string{"--kubeconfig", filepath.Join(l.dir, "tally-scanner.kubeconfig"), "--namespace", localNamespace, "--listen", "127.0.0.1:" + strconv.Itoa(l.port(name))}
	name, pair := pairOf(name)
	handover := "127.0.0.1:" + strconv.Itoa(l.port("handover"+pair))
	if name == "scanner" && pair != "" {
		// A pair of the shards, as a Pod of the Deployment: its identity is
		// its Pod's name.
		common = append(common, "--sharding", "--identity", "pair"+pair)
	} else if name == "scanner" {
		// One pair, leading (the chart shards even one replica; a Lease
		// duration's wait for every start is spared here).
		common = append(common, "--sharding=false")
	}
	if name == "scanner" {
		// The scanner hands its reports to the mergers on loopback, and
		// reads its results back from their final reports after a restart.
		common = append(common, "--handover-listen", handover, "--report-api", string(l.reportAPI),
			"--mutating-admission-policy-reports",
			// The scanner refuses loopback registries (issue 53): it is
			// allowed the suite's registry's port alone.
			"--registry-allow-cidrs", l.registry.Host)
		if l.sharded {
			// Kyverno's --exceptionNamespace: exceptions from the
			// platform's namespace only.
			common = append(common, "--exception-namespace", kind.ExceptionNamespace)
		} else {
			// As the kind install (the chart's default): exceptions of
			// every namespace, the platform's reaching every namespace.
			common = append(common, "--cluster-exception-namespaces", kind.ExceptionNamespace)
		}
		if l.mode == BesideKyverno {
			common = append(common, "--managed-by=kyverno")
		}
	}
	if name == "scanner" && l.mode == BesideKyverno { // as config/overlays/beside-kyverno
		return "tally-scanner", append(common, "--leader-elect=false", "--rescan-endpoint",
			"--webhook-listen=", "--policy-status=false")
	}
	if name == "scanner" {
		args := append(common, "--leader-elect=false", "--rescan-endpoint",
			"--webhook-listen", "127.0.0.1:"+strconv.Itoa(l.port("scanner-webhook"+pair)),
			// The webhook's rules follow the policies, as installed: a policy
			// is Ready once they send its requests (and have had a moment to
			// reach the API server), so the cases can create resources as
			// soon as a policy is Ready.
			"--webhook-configuration", webhookName)
		if l.webhookAuth {
			args = append(args, "--webhook-client-ca", l.cluster.WebhookClientCA)
		}
		return "tally-scanner", args
	}
	if l.mode == BesideKyverno { // as config/overlays/beside-kyverno
		common = append(common, "--managed-by=kyverno", "--ingest-kyverno-reports")
	}
	// The merger beside the scanner, as in the Pod: no Lease of its own (it
	// writes while its scanner is ready), reading the scanner on loopback.
	return "tally-merger", append(common, "--leader-elect=false", "--report-api", string(l.reportAPI), "--scanner-url", "http://"+handover)
}

// start starts a process and waits until it answers /healthz.
func (l *Local) start(ctx context.Context, name string) error {
	binary, args := l.args(name)
	var env []string
	health := "/healthz"
	if l.kyverno != nil && strings.HasPrefix(name, "kyverno-") {
		binary, args, env = l.kyvernoArgs(name)
		health = "/metrics" // Kyverno's processes serve their metrics once started
	}
	if !filepath.IsAbs(binary) {
		binary = filepath.Join(l.bin, binary)
	}
	logPath := filepath.Join(l.dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "---- %s %s\n", time.Now().Format(time.RFC3339), name)
	cmd := exec.Command(binary, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logFile, "---- %s %s exited: %v\n", time.Now().Format(time.RFC3339), name, err)
		logFile.Close()
		close(p.done)
		// Like a kubelet, start a process that exited on its own again (a
		// replica that lost its Lease exits, for one).
		if !p.killed.Load() && !l.stopping.Load() {
			time.Sleep(time.Second)
			if !l.stopping.Load() {
				_ = l.start(context.Background(), name) // a restart that fails shows as the case's failure
			}
		}
	}()
	l.mu.Lock()
	l.procs[name] = p
	l.mu.Unlock()
	url := "http://127.0.0.1:" + strconv.Itoa(l.port(name)) + health
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("%s exited at start; see %s", name, logPath)
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// kill stops a process with a signal and waits for it.
func (l *Local) kill(name string, sig syscall.Signal) {
	l.mu.Lock()
	p := l.procs[name]
	delete(l.procs, name)
	l.mu.Unlock()
	if p == nil {
		return
	}
	p.killed.Store(true)
	_ = p.cmd.Process.Signal(sig) // a process already gone has nothing to stop
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill() // a process already gone has nothing to kill
		<-p.done
	}
}

func (l *Local) createWebhookConfiguration(ctx context.Context) error {
	name, port := l.webhook()
	url := "https://127.0.0.1:" + strconv.Itoa(l.ports[port]) + "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "validate.conformance.tally.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete, admissionregistrationv1.Connect},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
			}},
			// Only the namespaces (and Namespace objects) of cases: the
			// control plane's own requests never wait on tally.
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: conformance.CaseLabel, Operator: metav1.LabelSelectorOpExists}}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "conformance.tally.dev/ignore", Operator: metav1.LabelSelectorOpDoesNotExist}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	_, err := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitCABundle waits until the webhook (tally-scanner's, or the Kyverno
// stand-in's) has put its CA into the webhook configuration (it generates
// and rotates its serving certificate).
func (l *Local) waitCABundle(ctx context.Context) error {
	name, port := l.webhook()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		vwc, err := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if len(vwc.Webhooks) == 0 || len(vwc.Webhooks[0].ClientConfig.CABundle) == 0 {
			return false, nil
		}
		if l.sharded {
			port = fmt.Sprintf("scanner-webhook-%d", l.livePairs()[0])
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(l.port(port)), time.Second)
		if err != nil {
			return false, nil // the bridge listens once its policies are listed
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the webhook did not set the caBundle of %s: %w (logs: %s)", name, err, filepath.Join(l.dir, "*.log"))
	}
	return nil
}

// KeepLogs makes Stop leave the processes' logs (Dir) in place, for a
// run that failed.
func (l *Local) KeepLogs() { l.keepLogs.Store(true) }

// Stop stops tally and the cluster, and removes Dir (its binaries only,
// after KeepLogs).
func (l *Local) Stop() error {
	l.stopping.Store(true)
	if l.registry != nil {
		l.registry.Stop()
	}
	if l.proxy != nil {
		_ = l.proxy.Close() // nothing is waiting on it any more
	}
	for _, name := range l.processes() {
		l.kill(name, syscall.SIGTERM)
	}
	var errs []error
	if l.cluster != nil {
		if l.kube != nil {
			name, _ := l.webhook()
			// Best effort: the control plane goes next anyway.
			_ = l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
		if l.reports != nil {
			l.reports.Stop()
		}
		errs = append(errs, l.cluster.Stop())
	}
	remove := l.dir
	if l.keepLogs.Load() {
		remove = l.bin
	}
	if remove != "" {
		errs = append(errs, os.RemoveAll(remove))
	}
	return errors.Join(errs...)
}

// ForgeReview posts an AdmissionReview to the webhook the API server calls,
// over TLS verified with the webhook configuration's caBundle, as a Pod that
// reaches the webhook's Service could, and checks it was answered.
func (l *Local) ForgeReview(ctx context.Context, review []byte) error {
	name, port := l.webhook()
	vwc, err := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(vwc.Webhooks) == 0 {
		return fmt.Errorf("webhook configuration %s has no webhook", name)
	}
	url := "https://127.0.0.1:" + strconv.Itoa(l.port(port)) + "/validate"
	return postReview(ctx, vwc.Webhooks[0].ClientConfig.CABundle, "", url, review)
}

// postReview posts a review to a webhook's URL as a caller with no client
// certificate, verifying the webhook's certificate with caBundle (anyone
// can read it) under serverName ("" for the URL's host). A TLS error
// (the webhook refused the handshake) wraps conformance.ErrForgeryRefused;
// an answer other than HTTP 200 is an error.
func postReview(ctx context.Context, caBundle []byte, serverName, url string, review []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return errors.New("forge: the webhook configuration has no CA bundle")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(review))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if strings.Contains(err.Error(), "tls: ") {
			return fmt.Errorf("forge: %w: %w", conformance.ErrForgeryRefused, err)
		}
		return fmt.Errorf("forge: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("forge: the webhook answered %s", resp.Status)
	}
	return nil
}

// ManagedBy is the label value of the final reports: kyverno beside Kyverno,
// as config/overlays/beside-kyverno sets it, else tally.
func (l *Local) ManagedBy() string {
	if l.mode == BesideKyverno {
		return "kyverno"
	}
	return "tally"
}

// Dir holds the processes' logs.
func (l *Local) Dir() string { return l.dir }

func (l *Local) Name() string {
	name := "local"
	switch {
	case l.kyverno != nil:
		name = "local-kyverno"
	case l.sharded:
		name = "local-sharded"
	}
	if l.reports != nil {
		name += ", reports in reports-server"
	}
	return name
}

// StoredBy is the annotation reports-server sets on the reports it serves,
// when the provider stores the reports there.
func (l *Local) StoredBy() (string, string) {
	if l.reports == nil {
		return "", ""
	}
	return reportsserver.Annotation, reportsserver.AnnotationValue
}
func (l *Local) Config() *rest.Config { return l.cluster.Config }

// Kube is a client of the cluster with the admin's rights.
func (l *Local) Kube() kubernetes.Interface { return l.kube }
func (l *Local) Kubeconfig() string         { return l.cluster.Kubeconfig }
func (l *Local) Can(what string) bool {
	switch what {
	case conformance.CanRescan, conformance.CanRestartScanner, conformance.CanRestartMerger, conformance.CanFailoverMerger, conformance.CanMetrics, conformance.CanRestartAPIServer, conformance.CanTally, conformance.CanFaultInject:
		return true
	case conformance.CanTallyWebhook:
		return l.mode == Standalone
	case conformance.CanWebhookClientAuth:
		return l.mode == Standalone && l.webhookAuth
	case conformance.CanIngest:
		return l.mode == BesideKyverno
	case conformance.CanShards:
		return l.sharded
	case conformance.CanExceptionNamespace:
		return l.sharded
	case conformance.CanTenantExceptions:
		return !l.sharded
	case conformance.CanImageRegistry:
		return l.registry != nil
	}
	return false
}

// ImageRegistry is the loopback registry of the suite's images.
func (l *Local) ImageRegistry() string { return l.registry.Host }

// Rescan asks the scanner (sharded: every pair's) for a full rescan and
// waits for it to finish.
func (l *Local) Rescan(ctx context.Context) error {
	if l.sharded {
		for _, i := range l.livePairs() {
			scanner, _ := pairProcesses(i)
			if err := l.rescan(ctx, scanner); err != nil {
				return err
			}
		}
		return nil
	}
	return l.rescan(ctx, "scanner")
}

func (l *Local) rescan(ctx context.Context, scanner string) error {
	url := "http://127.0.0.1:" + strconv.Itoa(l.port(scanner)) + "/rescan"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("rescan: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body) // a body cut short still names the refusal
		return fmt.Errorf("rescan: %s: %s", resp.Status, b.String())
	}
	return nil
}

// Restart kills tally-scanner or the mergers without warning (SIGKILL, as a
// crash or an eviction would) and starts them again; the API server is
// stopped gracefully and started again under the running processes.
func (l *Local) Restart(ctx context.Context, component string) error {
	if l.sharded && component != "apiserver" {
		return l.restartPairs(ctx, component)
	}
	switch component {
	case "scanner":
		l.kill("scanner", syscall.SIGKILL)
		return l.start(ctx, "scanner")
	case "merger":
		l.kill("merger", syscall.SIGKILL)
		return l.start(ctx, "merger")
	case "apiserver":
		restarted := time.Now()
		if err := l.cluster.RestartAPIServer(); err != nil {
			return err
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := l.kube.CoreV1().Namespaces().Get(ctx, localNamespace, metav1.GetOptions{})
			return err == nil, nil
		})
		if err != nil || l.kyverno == nil {
			return err
		}
		// Kyverno's admission controller may lose its Lease meanwhile, and
		// exit to be started again: its webhooks (failurePolicy Fail)
		// answer once it leads again.
		return l.waitKyvernoServing(ctx, restarted)
	}
	return fmt.Errorf("restart %s: %w", component, conformance.ErrUnsupported)
}

// Failover kills the merger without warning, as a crashed container, and
// starts it again: it resumes from the final reports and the scanner beside
// it, writing nothing that did not change. (A deployment fails over whole
// Pods, scanner and merger together: the kind provider deletes the Pod
// holding the Lease.)
func (l *Local) Failover(ctx context.Context, component string) error {
	if component != "merger" {
		return fmt.Errorf("failover %s: %w", component, conformance.ErrUnsupported)
	}
	if l.sharded {
		return l.restartPairs(ctx, "merger")
	}
	l.kill("merger", syscall.SIGKILL)
	return l.start(ctx, "merger")
}

func (l *Local) PolicyLoaded(ctx context.Context, policy *unstructured.Unstructured) (bool, error) {
	if !conformance.StatusReady(policy) {
		return false, nil
	}
	if l.kyverno != nil {
		// The real Kyverno writes a policy's Ready status before its
		// resource webhook sends it the policy's kinds: a request that comes
		// between is not reviewed.
		return l.kyvernoWebhookCovers(ctx, policy), nil
	}
	return true, nil
}

// AdmissionCovered implements conformance.AdmissionCoverer: beside the
// real Kyverno, its webhook sends the policy's requests.
func (l *Local) AdmissionCovered(ctx context.Context, policy *unstructured.Unstructured) bool {
	return l.kyverno == nil || l.kyvernoWebhookCovers(ctx, policy)
}

// kyvernoWebhookCovers says whether Kyverno's resource webhook sends the
// requests of every kind the policy reviews at admission: the kinds the
// validate rules of a classic policy with admission on match by name, the
// resources of a ValidatingPolicy's or GeneratingPolicy's resource rules
// (to that kind's own webhook). A policy matching otherwise, or of another
// kind, is taken as covered.
func (l *Local) kyvernoWebhookCovers(ctx context.Context, policy *unstructured.Unstructured) bool {
	plurals, webhook, ok := kyvernoAdmissionResources(policy)
	if !ok || len(plurals) == 0 {
		return true
	}
	vwc, err := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, kyvernoWebhookName, metav1.GetOptions{})
	if err != nil {
		return false
	}
	served := map[string]bool{}
	for _, w := range vwc.Webhooks {
		if !strings.HasPrefix(w.Name, webhook) {
			continue
		}
		for _, r := range w.Rules {
			for _, res := range r.Resources {
				served[res] = true
			}
		}
	}
	for _, p := range plurals {
		if !served[p] && !served["*"] && !served["*/*"] {
			return false
		}
	}
	return true
}

// kyvernoAdmissionResources are the resources (plurals) a policy reviews
// at admission through Kyverno's resource webhook, and the prefix of the
// names of the webhooks that send them ("" for a classic policy's); ok is
// false when they are not known by name (wildcards, groups, other kinds).
func kyvernoAdmissionResources(policy *unstructured.Unstructured) (plurals []string, webhook string, ok bool) {
	if strings.HasPrefix(policy.GetAPIVersion(), "policies.kyverno.io/") {
		switch policy.GetKind() {
		case "ValidatingPolicy":
			webhook = "vpol.validate.kyverno.svc"
		case "GeneratingPolicy":
			webhook = "gpol.validate.kyverno.svc"
		default:
			return nil, "", false
		}
		rules, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConstraints", "resourceRules")
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			res, _, _ := unstructured.NestedStringSlice(rm, "resources")
			for _, p := range res {
				if strings.ContainsAny(p, "*/") {
					return nil, "", false
				}
				plurals = append(plurals, p)
			}
		}
		return plurals, webhook, true
	}
	if !strings.HasPrefix(policy.GetAPIVersion(), "kyverno.io/") {
		return nil, "", false
	}
	if admission, found, _ := unstructured.NestedBool(policy.Object, "spec", "admission"); found && !admission {
		return nil, "", false
	}
	rules, _, _ := unstructured.NestedSlice(policy.Object, "spec", "rules")
	for _, r := range rules {
		rm, _ := r.(map[string]any)
		if _, validates := rm["validate"]; !validates {
			continue // other rules go through other webhooks
		}
		var filters []any
		if any, ok, _ := unstructured.NestedSlice(rm, "match", "any"); ok {
			filters = append(filters, any...)
		}
		if all, ok, _ := unstructured.NestedSlice(rm, "match", "all"); ok {
			filters = append(filters, all...)
		}
		for _, f := range filters {
			fm, _ := f.(map[string]any)
			kinds, _, _ := unstructured.NestedStringSlice(fm, "resources", "kinds")
			for _, k := range kinds {
				if strings.ContainsAny(k, "*/?.") || k == "" {
					return nil, "", false // a wildcard or a group: not checked
				}
				gvr, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Kind: k})
				plurals = append(plurals, gvr.Resource)
			}
		}
	}
	return plurals, "", true
}

var _ conformance.Provider = (*Local)(nil)

// fieldManager is the conformance suite's (conformance's runner writes with the same).
const fieldManager = "tally-conformance"

// errNoProvider is returned for an unknown provider name.
var errNoProvider = errors.New("unknown provider")

// Metrics reads the /metrics of the scanner, or of the merger holding the
// Lease.
func (l *Local) Metrics(ctx context.Context, component string) ([]byte, error) {
	if l.sharded && (component == "scanner" || component == "merger") {
		return l.shardedMetrics(ctx, component)
	}
	port := l.port(component)
	if port == 0 {
		return nil, fmt.Errorf("metrics of %s: %w", component, conformance.ErrUnsupported)
	}
	return l.metricsOf(ctx, port)
}

func (l *Local) metricsOf(ctx context.Context, port int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return b.Bytes(), err
}

// installRBAC applies the ServiceAccounts, Roles and ClusterRoles of the
// mode's overlay (config/overlays/standalone or beside-kyverno), and writes for each of tally's service accounts
// a kubeconfig that impersonates it: the processes run with exactly the
// rights a deployment grants them, so a missing permission fails a case.
func (l *Local) installRBAC(ctx context.Context, root string) error {
	overlay := string(l.mode)
	objs, err := kind.Render(filepath.Join(root, "config", "overlays", overlay))
	if err != nil {
		return fmt.Errorf("render config/overlays/%s: %w", overlay, err)
	}
	if l.mode == BesideKyverno {
		// The roles Kyverno's chart aggregates into admin, edit and view
		// (the tenant cases create Policies as a namespace's admin): what
		// tally's standalone install grants, config/rbac/tenants.
		tenants, err := kind.Render(filepath.Join(root, "config", "rbac", "tenants"))
		if err != nil {
			return fmt.Errorf("render config/rbac/tenants: %w", err)
		}
		objs = append(objs, tenants...)
	}
	var rbac []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			rbac = append(rbac, o)
		}
	}
	if len(rbac) == 0 {
		return fmt.Errorf("config/overlays/%s renders no RBAC", overlay)
	}
	if err := kind.ApplyObjects(ctx, l.cluster.Config, rbac, fieldManager); err != nil {
		return fmt.Errorf("apply tally's RBAC: %w", err)
	}
	admin, err := clientcmd.LoadFromFile(l.cluster.Kubeconfig)
	if err != nil {
		return err
	}
	for _, sa := range []string{"tally-scanner"} {
		cfg := admin.DeepCopy()
		for _, auth := range cfg.AuthInfos {
			auth.Impersonate = "system:serviceaccount:" + localNamespace + ":" + sa
		}
		if err := clientcmd.WriteToFile(*cfg, filepath.Join(l.dir, sa+".kubeconfig")); err != nil {
			return err
		}
	}
	return nil
}
