// Package process runs a tally daemon: Kubernetes client configuration,
// /healthz, /readyz and /metrics, and leader election through a Lease, so
// that only one replica writes at a time.
package process

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Options are the flags every daemon shares.
type Options struct {
	Name        string
	Kubeconfig  string
	Namespace   string
	QPS         float64
	Burst       int
	Listen      string
	LeaderElect bool
	LeaseName   string
	Identity    string
	Verbosity   int
	Profiling   bool
	// ReadyChecks are further conditions of /readyz on every replica,
	// leading or not (the admission webhook serving, for one): each returns
	// "" when ready, else why not.
	ReadyChecks []func() string
	// Gatherers are further metrics served beside the registry's (those
	// of a daemon's current run, registered afresh at each: Switch).
	Gatherers []prometheus.Gatherer
}

// Switch gathers the metrics of a daemon's current run: a sharded scanner
// runs anew on each shard, and registers its metrics afresh on a registry
// of the run's.
type Switch struct {
	current atomic.Pointer[prometheus.Registry]
}

// Set makes reg the registry gathered.
func (s *Switch) Set(reg *prometheus.Registry) { s.current.Store(reg) }

// Gather implements prometheus.Gatherer.
func (s *Switch) Gather() ([]*dto.MetricFamily, error) {
	if reg := s.current.Load(); reg != nil {
		return reg.Gather()
	}
	return nil, nil
}

// Bind registers the shared flags.
func (o *Options) Bind(fs *flag.FlagSet, name string) {
	host, _ := os.Hostname()
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "tally-system"
	}
	o.Name = name
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	fs.StringVar(&o.Namespace, "namespace", ns, "namespace of tally's Lease and state")
	fs.Float64Var(&o.QPS, "kube-api-qps", 100, "API requests per second (sustained): bounds the report writes of a first full scan")
	fs.IntVar(&o.Burst, "kube-api-burst", 200, "API requests in a burst")
	fs.StringVar(&o.Listen, "listen", ":8080", "address of /healthz, /readyz and /metrics")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect one active replica through a Lease")
	fs.StringVar(&o.LeaseName, "lease-name", name, "name of the leader-election Lease")
	fs.StringVar(&o.Identity, "identity", host, "this replica's identity in the Lease")
	fs.IntVar(&o.Verbosity, "v", 0, "log verbosity")
	fs.BoolVar(&o.Profiling, "profiling", false, "serve Go's pprof profiles under /debug/pprof/")
}

// SetDefault changes the default of a flag bound already (Bind's shared
// ones), for a daemon whose shipped topology differs: the value and what
// --help shows.
func SetDefault(fs *flag.FlagSet, name, value string) error {
	f := fs.Lookup(name)
	if f == nil {
		return fmt.Errorf("no flag --%s", name)
	}
	if err := f.Value.Set(value); err != nil {
		return fmt.Errorf("--%s default %q: %w", name, value, err)
	}
	f.DefValue = value
	return nil
}

// RESTConfig builds the client configuration with the daemon's rate limits.
func (o *Options) RESTConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	cfg.UserAgent = o.Name
	return cfg, nil
}

// Daemon is what a process runs while it leads.
type Daemon interface {
	Run(ctx context.Context) error
	// Synced reports whether the daemon's writes reflect the cluster.
	Synced() bool
}

// Handlers are extra endpoints a daemon serves beside the probes.
type Handlers map[string]http.Handler

// Run serves the probes and metrics and runs d, under leader election when
// enabled. A standby replica is ready; the leader once d is synced.
func Run(ctx context.Context, o Options, cfg *rest.Config, reg *prometheus.Registry, d Daemon, extra Handlers) error {
	log := logr.FromContextOrDiscard(ctx)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var leading atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		for _, check := range o.ReadyChecks {
			if why := check(); why != "" {
				http.Error(w, why, http.StatusServiceUnavailable)
				return
			}
		}
		if leading.Load() && !d.Synced() {
			http.Error(w, "not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok")) // the prober went away: nothing to tell it
	})
	mux.Handle("/metrics", promhttp.HandlerFor(append(prometheus.Gatherers{reg}, o.Gatherers...), promhttp.HandlerOpts{Registry: reg}))
	for path, h := range extra {
		mux.Handle(path, h)
	}
	if o.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	srv := &http.Server{Addr: o.Listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "health and metrics server failed")
		}
	}()
	defer func() {
		// The run's context has ended by now: the shutdown gets a bound of its own.
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx) // best effort: the process is stopping; an open probe connection may be cut
	}()

	if !o.LeaderElect {
		leading.Store(true)
		return d.Run(ctx)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: o.LeaseName, Namespace: o.Namespace},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	var runErr error
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading", "identity", o.Identity)
				leading.Store(true)
				defer leading.Store(false)
				runErr = d.Run(ctx)
			},
			OnStoppedLeading: func() { log.Info("no longer leading", "identity", o.Identity) },
		},
	})
	if runErr == nil && ctx.Err() == nil {
		// The Lease was lost (the API server unreachable past the renew
		// deadline, say): exit with an error so that the process is started
		// again and competes for it afresh.
		runErr = errors.New("lost the leader Lease")
	}
	return runErr
}

// ParseFlags parses a daemon's command line with the flag library and help
// style of the tally CLI (spf13/pflag, as cobra uses): --flag value or
// --flag=value, -h/--help printing the description and the flags. The flags
// are declared on fs (the standard library's, as Bind declares them). It
// exits 0 after --help and 2 on a bad flag, naming it.
func ParseFlags(name, description string, fs *flag.FlagSet, args []string) {
	pfs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	pfs.AddGoFlagSet(fs)
	pfs.SortFlags = true
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "%s\n\nUsage:\n  %s [flags]\n\nFlags:\n%s", description, name, pfs.FlagUsages())
	}
	// pflag calls Usage itself on --help before returning ErrHelp: the help
	// and errors are printed below, once, help on stdout.
	pfs.Usage = func() {}
	pfs.SetOutput(io.Discard)
	if err := pfs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			usage(os.Stdout)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "Error: %v\nRun '%s --help' for usage.\n", err, name)
		os.Exit(2)
	}
}
