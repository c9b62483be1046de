package harness

import (
	"context"
	"github.com/tally-dev/tally/conformance"

	"github.com/tally-dev/tally/e2e/kind"
)

// startKind creates the kind cluster of kind-config.yaml through
// e2e-framework's kind support, with tally built by the repository's
// Dockerfile and deployed from config/overlays/kind (see e2e/kind), and
// returns it as a Deployed provider; stop deletes the cluster.
func startKind(ctx context.Context) (conformance.Provider, func() error, error) {
	kubeconfig, stop, err := kind.Start(ctx, kind.ClusterName())
	if err != nil {
		return nil, nil, err
	}
	p, err := conformance.NewDeployed("kind", kubeconfig)
	if err != nil {
		_ = stop()
		return nil, nil, err
	}
	return p, stop, nil
}
