package harness

import (
	"context"
	"fmt"
	"os"

	"github.com/tally-dev/tally/conformance"
)

// ProviderFromEnv starts (local) or connects to (kind, kubeconfig) the
// provider named; it returns a function that stops what it started.
func ProviderFromEnv(ctx context.Context, name string) (conformance.Provider, func() error, error) {
	switch name {
	case "", "local", "local-beside-kyverno", "local-kyverno", "local-sharded":
		dir, err := os.MkdirTemp("", "tally-conformance-")
		if err != nil {
			return nil, nil, err
		}
		mode := Standalone
		if name == "local-beside-kyverno" || name == "local-kyverno" {
			mode = BesideKyverno
		}
		api, err := conformance.ReportAPIFromEnv()
		if err != nil {
			return nil, nil, err
		}
		auth, err := webhookAuthFromEnv()
		if err != nil {
			return nil, nil, err
		}
		replicas := 0
		if name == "local-sharded" {
			replicas = 3 // scanner pairs dividing the namespaces
		}
		var reportsServer bool
		switch v := os.Getenv("TALLY_CONFORMANCE_REPORTS_SERVER"); v {
		case "":
		case "etcd":
			reportsServer = true
		default:
			return nil, nil, fmt.Errorf("TALLY_CONFORMANCE_REPORTS_SERVER=%q: want etcd (reports-server beside the local control plane) or nothing", v)
		}
		l, err := StartLocal(ctx, dir, LocalOptions{Mode: mode, ReportAPI: api, NoWebhookAuth: !auth, Replicas: replicas, ReportsServer: reportsServer,
			Kyverno: name == "local-kyverno"})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Stop, nil
	case "kubeconfig":
		path := os.Getenv("TALLY_CONFORMANCE_KUBECONFIG")
		if path == "" {
			return nil, nil, fmt.Errorf("provider kubeconfig needs TALLY_CONFORMANCE_KUBECONFIG")
		}
		p, err := conformance.NewDeployed(ctx, "kubeconfig", path)
		return p, func() error { return nil }, err
	case "kind":
		return startKind(ctx)
	}
	return nil, nil, fmt.Errorf("%w %q: use local, local-beside-kyverno, local-kyverno, local-sharded, kind or kubeconfig", errNoProvider, name)
}

// webhookAuthFromEnv reads TALLY_CONFORMANCE_WEBHOOK_AUTH: on (the
// default) or off, whether tally's webhook authenticates its callers on
// the local control plane.
func webhookAuthFromEnv() (bool, error) {
	switch v := os.Getenv("TALLY_CONFORMANCE_WEBHOOK_AUTH"); v {
	case "", "on":
		return true, nil
	case "off":
		return false, nil
	default:
		return false, fmt.Errorf("TALLY_CONFORMANCE_WEBHOOK_AUTH=%q: use on or off", v)
	}
}
