// Package kind runs tally on a kind cluster for e2e-framework test suites
// (`make e2e-kind`): it builds tally's image with Docker, creates the cluster
// from kind-config.yaml through e2e-framework's kind support, loads the
// image, deploys config/overlays/kind, waits until tally is ready, and
// deletes the cluster when the suite finishes. It needs Docker and kind
// (pinned: KindVersion is installed with `go install` when kind is not on
// PATH).
//
// Deploy and Render are also what the config test uses to send every
// rendered object to a real API server.
package kind

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"
	kindsupport "sigs.k8s.io/e2e-framework/support/kind"

	"github.com/tally-dev/tally/e2e/cluster"
)

const (
	// KindVersion is the kind release e2e-framework installs when kind is
	// not on PATH.
	KindVersion = "v0.33.0"
	// Image is the image `docker build` tags and config/overlays/kind runs.
	Image = "tally:e2e"
	// Overlay is the kustomization deployed on the cluster, from the repository root.
	Overlay = "config/overlays/kind"
	// ConfigFile is the kind cluster configuration, from the repository root.
	ConfigFile = "kind-config.yaml"
	// ReadyTimeout bounds the wait for tally's Deployments and webhook.
	ReadyTimeout = 5 * time.Minute
)

// ClusterName is the kind cluster of a run: $TALLY_KIND_CLUSTER, or "tally".
func ClusterName() string {
	if n := os.Getenv("TALLY_KIND_CLUSTER"); n != "" {
		return n
	}
	return "tally"
}

// Setup builds the image, creates the kind cluster clusterName (the
// environment's kubeconfig then points at it), loads the image into its
// nodes, deploys tally and waits until it is ready. When a step after the
// cluster's creation fails, the returned context still carries the cluster,
// so that Finish deletes it.
func Setup(clusterName string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		root, err := cluster.RepoRoot()
		if err != nil {
			return ctx, err
		}
		if err := BuildImage(ctx, root, Image); err != nil {
			return ctx, err
		}
		provider := kindsupport.NewProvider().WithVersion(KindVersion)
		ctx, err = envfuncs.CreateClusterWithConfig(provider, clusterName, filepath.Join(root, ConfigFile))(ctx, cfg)
		if err != nil {
			return ctx, fmt.Errorf("create kind cluster %s: %w", clusterName, err)
		}
		if ctx, err = envfuncs.LoadImageToCluster(clusterName, Image)(ctx, cfg); err != nil {
			return ctx, fmt.Errorf("load %s into kind cluster %s: %w", Image, clusterName, err)
		}
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.KubeconfigFile())
		if err != nil {
			return ctx, fmt.Errorf("kubeconfig of kind cluster %s: %w", clusterName, err)
		}
		if err := Deploy(ctx, rc, filepath.Join(root, Overlay), false); err != nil {
			return ctx, fmt.Errorf("deploy %s: %w", Overlay, err)
		}
		if err := WaitReady(ctx, rc, Namespace, ReadyTimeout); err != nil {
			return ctx, err
		}
		return ctx, nil
	}
}

// Start runs Setup outside an e2e-framework environment (for runners that
// are not one, such as the conformance suite's providers): it returns the
// kubeconfig file of the ready cluster and a function that runs Finish.
// When Setup fails, what it created is deleted before Start returns.
func Start(ctx context.Context, clusterName string) (kubeconfig string, stop func() error, err error) {
	cfg := envconf.New()
	ctx, err = Setup(clusterName)(ctx, cfg)
	keep := context.WithoutCancel(ctx) // the cluster is deleted even after ctx ends
	stop = func() error {
		_, err := Finish(clusterName)(keep, cfg)
		return err
	}
	if err != nil {
		if stopErr := stop(); stopErr != nil && !strings.Contains(stopErr.Error(), "context cluster is nil") {
			err = fmt.Errorf("%w (and deleting the cluster: %v)", err, stopErr)
		}
		return "", nil, err
	}
	return cfg.KubeconfigFile(), stop, nil
}

// Finish deletes the kind cluster clusterName. With $TALLY_KIND_LOGS set it
// first exports the cluster's logs (nodes, pods, tally) into that folder;
// with TALLY_KIND_KEEP=1 it keeps the cluster for inspection.
func Finish(clusterName string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		if dir := os.Getenv("TALLY_KIND_LOGS"); dir != "" {
			if c, err := envfuncs.ExportClusterLogs(clusterName, dir)(ctx, cfg); err == nil {
				ctx = c
			} else {
				fmt.Fprintf(os.Stderr, "kind: exporting logs of %s to %s: %v\n", clusterName, dir, err)
			}
		}
		if os.Getenv("TALLY_KIND_KEEP") == "1" {
			fmt.Fprintf(os.Stderr, "kind: keeping cluster %s (TALLY_KIND_KEEP=1); delete it with: kind delete cluster --name %s\n", clusterName, clusterName)
			return ctx, nil
		}
		return envfuncs.DestroyCluster(clusterName)(ctx, cfg)
	}
}

// BuildImage runs `docker build -t image .` in the repository root, with
// BuildKit (the Dockerfile uses cache mounts). The error carries the end of
// Docker's output.
func BuildImage(ctx context.Context, root, image string) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("building %s needs Docker: %w", image, err)
	}
	cmd := exec.CommandContext(ctx, "docker", "build", "-t", image, ".")
	cmd.Dir = root
	// The Dockerfile's cache mounts need BuildKit (docker buildx).
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker build -t %s . (in %s): %w\n%s", image, root, err, tail(out.Bytes(), 4000))
	}
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
