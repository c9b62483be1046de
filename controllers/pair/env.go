package pair

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/internal/process"
)

// Env is what every component of one process of a pair (the scanner's or
// the merger's container) takes from that process rather than making its
// own: the clock, the metrics registry and the clients of the API server
// (the logger is the context's). RunScanner and RunMerger each build one
// with newEnv and hand its parts down; nothing below reads the time or the
// configuration on its own.
type Env struct {
	Clock     clock.WithTicker
	Registry  *prometheus.Registry
	Config    *rest.Config
	Dynamic   dynamic.Interface
	Kube      kubernetes.Interface
	Discovery discovery.DiscoveryInterface
}

// envOptions say how a process's clients are made.
type envOptions struct {
	// Clock nil is the real clock.
	Clock clock.WithTicker
	// SharedRateLimit gives every client of the process one token bucket
	// of --qps and --burst (the merger); false, each client has its own
	// (the scanner, whose scan, webhook rules and data reads are paced
	// apart).
	SharedRateLimit bool
}

// newEnv builds a process's environment from its flags.
func newEnv(o *process.Options, eo envOptions) (*Env, error) {
	e := &Env{Clock: eo.Clock, Registry: prometheus.NewRegistry()}
	if e.Clock == nil {
		e.Clock = clock.RealClock{}
	}
	cfg, err := o.RESTConfig()
	if err != nil {
		return nil, err
	}
	if eo.SharedRateLimit {
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	e.Config = cfg
	if e.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if e.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if e.Discovery, err = discovery.NewDiscoveryClientForConfig(cfg); err != nil {
		return nil, err
	}
	return e, nil
}
