// Command tally-scanner is tally's scan engine: it keeps the store in step
// with the cluster, evaluates the background-enabled validate rules and
// writes BackgroundScanReports.
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/textlogger"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/controllers/scan"
	"github.com/tally-dev/tally/internal/process"
	"github.com/tally-dev/tally/memstore"
)

type options struct {
	process.Options
	workers        int
	interval       time.Duration
	stateConfigMap string
	rescanEndpoint bool
}

func main() {
	var o options
	o.Bind(flag.CommandLine, "tally-scanner")
	flag.IntVar(&o.workers, "workers", 2, "resources evaluated in parallel")
	flag.DurationVar(&o.interval, "background-scan-interval", time.Hour, "global background scan interval (policies may override it)")
	flag.StringVar(&o.stateConfigMap, "state-configmap", "tally-scan-state", "ConfigMap persisting each policy's last complete scan")
	flag.BoolVar(&o.rescanEndpoint, "rescan-endpoint", false, "serve POST /rescan, which forces a full rescan (for operators and benchmarks)")
	flag.Parse()

	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.Verbosity)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(logr.NewContext(ctx, log), o)
	stop()
	if err != nil {
		log.Error(err, "tally-scanner failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	cfg, err := o.RESTConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	store, err := memstore.New()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), api.AddToScheme(scheme)); err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	reg := prometheus.NewRegistry()
	scanner := scan.New(dyn, memory.NewMemCacheClient(disc), store, scan.Options{
		Workers: o.workers, Interval: o.interval, StateNamespace: o.Namespace, StateName: o.stateConfigMap,
		Registry: reg, Recorder: broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "tally-scanner"}),
	})
	rescan := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST to force a full rescan", http.StatusMethodNotAllowed)
			return
		}
		if err := scanner.RescanAll(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("rescanned"))
	})
	handlers := process.Handlers{}
	if o.rescanEndpoint {
		handlers["/rescan"] = rescan
	}
	return process.Run(ctx, o.Options, cfg, reg, scanner, handlers)
}
