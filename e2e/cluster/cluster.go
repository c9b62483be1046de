// Package cluster gives tests a real Kubernetes cluster.
//
// By default it starts a local control plane: etcd and kube-apiserver through
// controller-runtime's envtest (random loopback ports, TLS, client-certificate
// authentication, RBAC), plus kube-controller-manager running only the
// garbage-collector, namespace, service-account and ClusterRole-aggregation
// controllers, so that ownerReferences cascade and aggregated roles fill as
// they do in a real cluster. The binaries are
// built from their Go modules by hack/controlplane/build.sh and cached
// outside the clone.
//
// When E2E_KUBECONFIG names a kubeconfig, that cluster (kind, a real one) is
// used instead and nothing is started. Plain KUBECONFIG is never read, so no
// test touches a user's cluster by accident.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Environment variables that steer where the cluster comes from.
const (
	// EnvKubeconfig opts in to an existing cluster.
	EnvKubeconfig = "E2E_KUBECONFIG"
	// EnvAssets names the folder holding kube-apiserver, etcd and kube-controller-manager.
	EnvAssets = "TALLY_CONTROLPLANE_ASSETS"
)

// Cluster is a running cluster (local or existing).
type Cluster struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// Local is true when this package started the control plane.
	Local bool
	// WebhookClientCA is the PEM file of the CA that signed the client
	// certificate a local kube-apiserver presents to every admission
	// webhook it calls ("" for an existing cluster): give it to
	// tally-scanner as --webhook-client-ca.
	WebhookClientCA string

	env      *envtest.Environment
	kcm      *exec.Cmd
	kcmDone  chan error
	dir      string
	stopOnce sync.Once
	stopErr  error
}

// Options tune a local control plane.
type Options struct {
	// Dir holds the kubeconfig, certificates and logs. Empty: a temporary folder, removed on Stop.
	Dir string
	// NoControllerManager skips kube-controller-manager (no garbage collection).
	NoControllerManager bool
	// Logs, if set, receives the control plane's output.
	Logs *os.File
	// Aggregator sets the API server up for aggregated API servers
	// (front-proxy certificate, request headers, routing to endpoints), for
	// reports-server (e2e/reportsserver).
	Aggregator bool
}

// Start returns the cluster named by E2E_KUBECONFIG, or starts a local one.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if path := os.Getenv(EnvKubeconfig); path != "" {
		return existing(path)
	}
	return startLocal(ctx, opts)
}

func existing(path string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load %s=%s: %w", EnvKubeconfig, path, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return &Cluster{Config: cfg, Kubeconfig: path}, nil
}

func startLocal(ctx context.Context, opts Options) (_ *Cluster, retErr error) {
	assets, err := Assets(ctx)
	if err != nil {
		return nil, err
	}
	dir := opts.Dir
	removeDir := false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tally-cluster-"); err != nil {
			return nil, fmt.Errorf("make cluster folder: %w", err)
		}
		removeDir = true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make cluster folder: %w", err)
	}
	c := &Cluster{Local: true}
	if removeDir {
		c.dir = dir
	}
	defer func() {
		if retErr != nil {
			_ = c.Stop() // the start's error is the one to report; Stop cleans up what it can
		}
	}()

	wrappers := filepath.Join(dir, "bin")
	if err := os.MkdirAll(wrappers, 0o755); err != nil {
		return nil, fmt.Errorf("make wrapper folder: %w", err)
	}
	apiserverPath, err := dieWithParent(wrappers, filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		return nil, err
	}
	etcdPath, err := dieWithParent(wrappers, filepath.Join(assets, "etcd"))
	if err != nil {
		return nil, err
	}

	env := &envtest.Environment{
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	api := env.ControlPlane.GetAPIServer()
	api.Path = apiserverPath
	// A fixed certificate folder (not a random one envtest removes on Stop)
	// keeps the serving certificates across RestartAPIServer.
	api.CertDir = filepath.Join(dir, "apiserver")
	if err := os.MkdirAll(api.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("make API server certificate folder: %w", err)
	}
	api.Out, api.Err = opts.Logs, opts.Logs
	caFile, admissionConfig, err := WebhookClientFiles(filepath.Join(dir, "webhook-client"))
	if err != nil {
		return nil, err
	}
	c.WebhookClientCA = caFile
	api.Configure().Set("admission-control-config-file", admissionConfig)
	// A bare API server has no endpoints controller for itself; without this
	// it logs loopback-endpoint errors every few seconds.
	api.Configure().Set("endpoint-reconciler-type", "none")
	// MutatingAdmissionPolicies (beta, off by default in Kubernetes 1.35)
	// served, for the reports of R44.
	api.Configure().Set("feature-gates", "MutatingAdmissionPolicy=true")
	api.Configure().Set("runtime-config", "admissionregistration.k8s.io/v1beta1=true")
	if opts.Aggregator {
		set := func(flag, value string) { api.Configure().Set(flag, value) }
		if err := configureAggregation(set, filepath.Join(dir, "front-proxy")); err != nil {
			return nil, err
		}
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath, Out: opts.Logs, Err: opts.Logs}
	env.ControlPlane.Etcd.Configure().Set("unsafe-no-fsync", "true")

	cfg, err := env.Start()
	c.env = env
	if err != nil {
		return nil, fmt.Errorf("start control plane from %s: %w", assets, err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c.Config = cfg

	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	if !opts.NoControllerManager {
		if err := c.startControllerManager(wrappers, assets, api.CertDir, opts.Logs); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// startControllerManager runs the controllers a report pipeline relies on:
// the garbage collector (reports owned by deleted resources go), the namespace
// controller (deleted namespaces empty), the service-account controllers, and
// the ClusterRole aggregation controller (tally-scanner's read role is aggregated).
func (c *Cluster) startControllerManager(wrappers, assets, certDir string, logs *os.File) error {
	kcmPath, err := dieWithParent(wrappers, filepath.Join(assets, "kube-controller-manager"))
	if err != nil {
		return err
	}
	kcmUser, err := c.env.AddUser(envtest.User{Name: "system:kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("provision controller-manager user: %w", err)
	}
	kubeconfig, err := kcmUser.KubeConfig()
	if err != nil {
		return fmt.Errorf("controller-manager kubeconfig: %w", err)
	}
	kcmConfig := filepath.Join(filepath.Dir(c.Kubeconfig), "kcm.kubeconfig")
	if err := os.WriteFile(kcmConfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("write controller-manager kubeconfig: %w", err)
	}
	caFile := filepath.Join(filepath.Dir(c.Kubeconfig), "ca.crt")
	if err := os.WriteFile(caFile, c.Config.CAData, 0o600); err != nil {
		return fmt.Errorf("write cluster CA: %w", err)
	}
	cmd := exec.Command(kcmPath,
		"--kubeconfig="+kcmConfig,
		"--authentication-kubeconfig="+kcmConfig,
		"--authorization-kubeconfig="+kcmConfig,
		"--controllers=namespace-controller,serviceaccount-controller,serviceaccount-token-controller,garbage-collector-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+filepath.Join(certDir, "sa-signer.key"),
		"--root-ca-file="+caFile,
		"--concurrent-gc-syncs=5",
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start kube-controller-manager: %w", err)
	}
	c.kcm = cmd
	c.kcmDone = make(chan error, 1)
	go func() { c.kcmDone <- cmd.Wait() }()
	return nil
}

// Stop stops a local control plane (nothing for an existing cluster). It is
// safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		if c.kcm != nil && c.kcm.Process != nil {
			_ = c.kcm.Process.Signal(syscall.SIGTERM) // an exited process is what we want; kcmDone says when
			select {
			case <-c.kcmDone:
			case <-time.After(10 * time.Second):
				_ = c.kcm.Process.Kill() // as above: the wait below is the check
				<-c.kcmDone
			}
		}
		if c.env != nil {
			if err := c.env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop control plane: %w", err))
			}
		}
		if c.dir != "" {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", c.dir, err))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// dieWithParent writes a wrapper that runs binary with a parent-death signal,
// so that a test binary that panics or is killed never leaves a control plane
// behind. Without setpriv the binary is used as it is.
func dieWithParent(dir, binary string) (string, error) {
	if _, err := os.Stat(binary); err != nil {
		return "", fmt.Errorf("control plane binary: %w", err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return binary, nil
	}
	path := filepath.Join(dir, filepath.Base(binary))
	script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, shellQuote(binary))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("write wrapper for %s: %w", binary, err)
	}
	return path, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// RestartAPIServer stops kube-apiserver gracefully and starts it again on the
// same address with the same certificates (etcd keeps running), as a rolling
// control-plane upgrade would. Only for a local control plane.
func (c *Cluster) RestartAPIServer() error {
	if c.env == nil {
		return errors.New("restart the API server: not a local control plane")
	}
	api := c.env.ControlPlane.GetAPIServer()
	api.StopTimeout = 15 * time.Second
	if err := api.Stop(); err != nil {
		// It stops listening at once but may linger in its shutdown
		// sequence; finish it as a crash would.
		if kerr := killByArgument(api.CertDir); kerr != nil {
			return fmt.Errorf("stop kube-apiserver: %w (and kill: %v)", err, kerr)
		}
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver again: %w", err)
	}
	return nil
}

// killByArgument SIGKILLs the processes whose command line holds arg (the
// API server's unique certificate folder) and waits until they are gone.
func killByArgument(arg string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(arg)) || !bytes.Contains(cmdline, []byte("kube-apiserver")) {
			continue
		}
		pids = append(pids, pid)
		_ = syscall.Kill(pid, syscall.SIGKILL) // gone already is fine: the loop below waits for each
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && bytes.Contains(status, []byte(") Z ")) {
				break // a zombie: dead, waiting for its parent to reap it
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("kube-apiserver (pid %d) does not die", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
