// Command cluster starts and stops the local control plane of package
// e2e/cluster by hand (make cluster-up / make cluster-down).
//
//	cluster up --dir .cluster     start in the background; prints the kubeconfig path
//	cluster down --dir .cluster   stop it
//	cluster serve --dir .cluster  (internal) run in the foreground until signalled
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tally-dev/tally/e2e/cluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down|serve --dir DIR")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "folder for the kubeconfig, certificates, logs and pid file")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err == nil {
		switch os.Args[1] {
		case "up":
			err = up(abs)
		case "down":
			err = down(abs)
		case "serve":
			err = serve(abs)
		default:
			err = fmt.Errorf("unknown command %q (want up, down or serve)", os.Args[1])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// up starts `serve` as a detached process and waits for its kubeconfig.
func up(dir string) error {
	if pid, err := readPid(dir); err == nil && syscall.Kill(pid, 0) == nil {
		return fmt.Errorf("already running (pid %d); kubeconfig: %s", pid, filepath.Join(dir, "kubeconfig"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "ready"))
	logf, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "serve", "--dir", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(3 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			kc := filepath.Join(dir, "kubeconfig")
			fmt.Printf("cluster is up. export KUBECONFIG=%s  (tests: export E2E_KUBECONFIG=%s)\n", kc, kc)
			fmt.Printf(`
It is a control plane without nodes: Pods are stored but never run, which is
all tally needs (it reads and reports; the CRDs are installed). Run tally's
processes against it by hand, each in its own terminal:

  kubectl --kubeconfig %[1]s create namespace tally-system
  go run ./cmd/tally-scanner --kubeconfig %[1]s --namespace tally-system --sharding=false --leader-elect=false --webhook-listen=
  go run ./cmd/tally-merger  --kubeconfig %[1]s --namespace tally-system --leader-elect=false --listen=:8081

then create policies and resources (kubectl apply -f config/samples/policies -f config/samples/resources
after creating their namespaces) and read the reports: kubectl get polr -A; what the scanner
hands the merger on loopback: kubectl --server http://127.0.0.1:8095 get bgscanr -A.
(--webhook-listen= leaves the admission webhook off: the API server would need to reach it.)
`, kc)
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("control plane exited early (%v); see %s", err, logf.Name())
		case <-deadline:
			return fmt.Errorf("control plane not ready after 3 minutes; see %s", logf.Name())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func serve(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Logs: os.Stderr})
	if err != nil {
		return err
	}
	if err := cluster.InstallCRDs(c.Config); err != nil {
		_ = c.Stop()
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		_ = c.Stop()
		return err
	}
	<-ctx.Done()
	return c.Stop()
}

func down(dir string) error {
	pid, err := readPid(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no cluster recorded in %s", dir)
	}
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop pid %d: %w", pid, err)
	}
	for range 150 {
		if syscall.Kill(pid, 0) != nil {
			_ = os.Remove(filepath.Join(dir, "pid"))
			_ = os.Remove(filepath.Join(dir, "ready"))
			fmt.Println("cluster stopped")
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("pid %d still running after 30s", pid)
}

func readPid(dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}
