// Command tally-merger reconciles AdmissionReports and BackgroundScanReports
// into the final PolicyReports and ClusterPolicyReports.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2/textlogger"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/controllers/pair"
	"github.com/tally-dev/tally/internal/process"
	"github.com/tally-dev/tally/report"
)

// defaultGCPercent is the merger's garbage-collection target unless GOGC is
// set. Its live heap is small (about 15 MiB at 10,000 reports) while watch
// events are decoded into short-lived maps (about 58 KiB per report): with
// Go's default of 100 the peak RSS at 10,000 reports was 103 MiB, with 50 it
// was 84 MiB (hack/mergebench), for a little more GC CPU.
const defaultGCPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	var o process.Options
	o.Bind(flag.CommandLine, "tally-merger")
	var mo merge.Options
	flag.IntVar(&mo.Workers, "workers", 2, "resources merged in parallel")
	allowed := flag.String("allowed-results", "", "comma-separated results to report (default: all of pass,fail,warn,error,skip)")
	flag.DurationVar(&mo.OrphanGrace, "orphan-grace", merge.DefaultOrphanGrace, "check an intermediate report without ownerReference for a deleted resource once it has not changed for this long")
	flag.DurationVar(&mo.OrphanRecheck, "orphan-recheck", merge.DefaultOrphanRecheck, "check again after this long a resource found alive")
	flag.StringVar(&mo.ManagedBy, "managed-by", report.ManagedBy, "value of the app.kubernetes.io/managed-by label of the final reports (PolicyReports, ClusterPolicyReports), and the one the merger recognises its own reports by at start-up; beside Kyverno set it to kyverno, which Kyverno's tooling selects reports by (intermediate reports stay labelled tally)")
	flag.StringVar((*string)(&mo.ReportAPI), "report-api", string(report.APIWGPolicy), "the API of the final reports: wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReport, ClusterPolicyReport) or openreports (openreports.io/v1alpha1 Report, ClusterReport, as Kyverno 1.15+ can write)")
	scannerURL := flag.String("scanner-url", "http://127.0.0.1:8095", "where the scanner beside the merger hands over its BackgroundScanReports (its --handover-listen); the merger writes only while that scanner is ready (it leads and has scanned everything)")
	flag.BoolVar(&mo.Ingest, "ingest-kyverno-reports", false, "beside Kyverno: merge the admission reports of its admission controller (EphemeralReports of Kyverno 1.13+, kyverno.io AdmissionReports of 1.10-1.12) into the final reports, and delete each once merged")
	flag.Float64Var(&mo.OrphanQPS, "orphan-qps", merge.DefaultOrphanQPS, "resource reads per second of the orphan check")
	process.ParseFlags("tally-merger", "tally-merger merges the AdmissionReports and BackgroundScanReports of every resource into its final report\n(PolicyReport or ClusterPolicyReport, or an OpenReports Report), following Kyverno's reporting rules.", flag.CommandLine, os.Args[1:])

	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.Verbosity)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(logr.NewContext(ctx, log), o, mo, *allowed, *scannerURL)
	stop()
	if err != nil {
		log.Error(err, "tally-merger failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o process.Options, mo merge.Options, allowed, scannerURL string) error {
	filter, err := parseAllowed(allowed)
	if err != nil {
		return err
	}
	api, err := report.ParseAPI(string(mo.ReportAPI))
	if err != nil {
		return fmt.Errorf("--report-api: %w", err)
	}
	mo.ReportAPI = api
	if errs := validation.IsValidLabelValue(mo.ManagedBy); mo.ManagedBy == "" || len(errs) > 0 {
		return fmt.Errorf("--managed-by %q is not a label value: %s", mo.ManagedBy, strings.Join(errs, "; "))
	}
	if mo.OrphanGrace < 0 || mo.OrphanRecheck < 0 || mo.OrphanQPS < 0 {
		return fmt.Errorf("--orphan-grace, --orphan-recheck and --orphan-qps must not be negative")
	}
	cfg, err := o.RESTConfig()
	if err != nil {
		return err
	}
	// One rate limit for every client of the merger.
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	mo.Filter, mo.Registry, mo.RESTConfig = filter, reg, cfg
	mo.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	// The final reports' metadata, watched so that one someone else
	// changes is put right (R48).
	if mo.Metadata, err = metadata.NewForConfig(cfg); err != nil {
		return err
	}
	u, err := url.Parse(scannerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--scanner-url %q is not an http(s) URL", scannerURL)
	}
	// The hand-over's client is made for each run of the scanner followed
	// (under its incarnation).
	return process.Run(ctx, o, cfg, reg, pair.NewFollower(merge.New(dyn, mo), scannerURL, nil), nil)
}

func parseAllowed(s string) (merge.Filter, error) {
	var f merge.Filter
	if s == "" {
		return f, nil
	}
	f.AllowedResults = map[wgv1alpha2.Result]bool{}
	for _, r := range strings.Split(s, ",") {
		switch v := wgv1alpha2.Result(strings.TrimSpace(r)); v {
		case wgv1alpha2.ResultPass, wgv1alpha2.ResultFail, wgv1alpha2.ResultWarn, wgv1alpha2.ResultError, wgv1alpha2.ResultSkip:
			f.AllowedResults[v] = true
		default:
			return f, fmt.Errorf("--allowed-results: %q is not one of pass, fail, warn, error, skip", r)
		}
	}
	return f, nil
}
