package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/e2e/cluster"
)

var testenv env.Environment

// webhookClientCA is the CA of the client certificate the local API server
// presents to webhooks ("" on an existing cluster): the admission bridges
// of the tests require it, as the README tells cluster admins to set up.
var webhookClientCA string

// TestMain owns the cluster: it starts it (or attaches to E2E_KUBECONFIG),
// installs tally's CRDs, runs the tests and stops everything, also on
// SIGINT/SIGTERM. A cluster that cannot start fails the run: these tests
// never skip for want of a server.
func TestMain(m *testing.M) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		stop()
		fmt.Fprintf(os.Stderr, "e2e: no cluster: %v\n", err)
		os.Exit(1)
	}
	webhookClientCA = c.WebhookClientCA
	go func() { // interrupted: stop the control plane before the process dies
		<-ctx.Done()
		_ = c.Stop()
	}()

	cfg := envconf.NewWithKubeConfig(c.Kubeconfig)
	if err := api.AddToScheme(cfg.Client().Resources().GetScheme()); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: scheme: %v\n", err)
		os.Exit(1)
	}
	testenv = env.NewWithConfig(cfg)
	testenv.Setup(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		return ctx, cluster.InstallCRDs(c.Config)
	})
	testenv.Finish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		return ctx, c.Stop()
	})
	code := testenv.Run(m)
	stop()
	os.Exit(code)
}
