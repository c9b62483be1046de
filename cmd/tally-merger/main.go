// Command tally-merger reconciles AdmissionReports and BackgroundScanReports
// into the final PolicyReports and ClusterPolicyReports.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
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
	c := bindFlags(flag.CommandLine)
	process.ParseFlags("tally-merger", "tally-merger merges the AdmissionReports and BackgroundScanReports of every resource into its final report\n(PolicyReport or ClusterPolicyReport, or an OpenReports Report), following Kyverno's reporting rules.", flag.CommandLine, os.Args[1:])

	if err := c.check(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\nRun 'tally-merger --help' for usage.\n", err)
		os.Exit(2)
	}
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(c.Options.Verbosity)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(logr.NewContext(ctx, log), c)
	stop()
	if err != nil {
		log.Error(err, "tally-merger failed")
		os.Exit(1)
	}
}

// config is what tally-merger's flags set.
type config struct {
	pair.MergerOptions
	allowed string
}

// bindFlags binds tally-merger's flags to the config they set.
func bindFlags(fs *flag.FlagSet) *config {
	c := &config{}
	c.Options.Bind(fs, "tally-merger")
	// As the Pod runs it: beside the scanner (which serves :8080), writing
	// while that scanner is ready, with no Lease of its own (the pair's is
	// the scanner's). Both flags exist and take these values: no error.
	_ = process.SetDefault(fs, "listen", ":8081")
	_ = process.SetDefault(fs, "leader-elect", "false")
	fs.IntVar(&c.Merge.Workers, "workers", 2, "resources merged in parallel")
	fs.StringVar(&c.allowed, "allowed-results", "", "comma-separated results to report (default: all of pass,fail,warn,error,skip)")
	fs.DurationVar(&c.Merge.OrphanGrace, "orphan-grace", merge.DefaultOrphanGrace, "check an intermediate report without ownerReference for a deleted resource once it has not changed for this long")
	fs.DurationVar(&c.Merge.OrphanRecheck, "orphan-recheck", merge.DefaultOrphanRecheck, "check again after this long a resource found alive")
	fs.StringVar(&c.Merge.ManagedBy, "managed-by", report.ManagedBy, "value of the app.kubernetes.io/managed-by label of the final reports (PolicyReports, ClusterPolicyReports), and the one the merger recognises its own reports by at start-up; beside Kyverno set it to kyverno, which Kyverno's tooling selects reports by (intermediate reports stay labelled tally)")
	fs.StringVar((*string)(&c.Merge.ReportAPI), "report-api", string(report.APIWGPolicy), "the API of the final reports: wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReport, ClusterPolicyReport) or openreports (openreports.io/v1alpha1 Report, ClusterReport, as Kyverno 1.15+ can write)")
	fs.StringVar(&c.ScannerURL, "scanner-url", "http://127.0.0.1:8095", "where the scanner beside the merger hands over its BackgroundScanReports (its --handover-listen); the merger writes only while that scanner is ready (it leads and has scanned everything)")
	fs.BoolVar(&c.Merge.Ingest, "ingest-kyverno-reports", false, "beside Kyverno: merge the admission reports of its admission controller (EphemeralReports of Kyverno 1.13+, kyverno.io AdmissionReports of 1.10-1.12) into the final reports, and delete each once merged")
	fs.StringVar(&c.KeySecret, "report-key-secret", merge.DefaultKeySecret, "Secret in --namespace holding the key the merger signs its final reports with (made when missing): a report read back at start-up counts as the merger's only when its signature verifies (R48)")
	fs.Float64Var(&c.Merge.OrphanQPS, "orphan-qps", merge.DefaultOrphanQPS, "resource reads per second of the orphan check")
	return c
}

// check refuses flag values that cannot work, naming them, and completes
// the merge options they give (the results filter, the report API).
func (c *config) check() error {
	var errs []error
	filter, err := parseAllowed(c.allowed)
	if err != nil {
		errs = append(errs, err)
	}
	c.Merge.Filter = filter
	if api, err := report.ParseAPI(string(c.Merge.ReportAPI)); err != nil {
		errs = append(errs, fmt.Errorf("--report-api: %w", err))
	} else {
		c.Merge.ReportAPI = api
	}
	if e := validation.IsValidLabelValue(c.Merge.ManagedBy); c.Merge.ManagedBy == "" || len(e) > 0 {
		errs = append(errs, fmt.Errorf("--managed-by %q is not a label value: %s", c.Merge.ManagedBy, strings.Join(e, "; ")))
	}
	if c.Merge.OrphanGrace < 0 || c.Merge.OrphanRecheck < 0 || c.Merge.OrphanQPS < 0 {
		errs = append(errs, fmt.Errorf("--orphan-grace, --orphan-recheck and --orphan-qps must not be negative"))
	}
	if c.Merge.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers %d: at least one worker merges", c.Merge.Workers))
	}
	if u, err := url.Parse(c.ScannerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--scanner-url %q is not an http(s) URL", c.ScannerURL))
	}
	return errors.Join(errs...)
}

func run(ctx context.Context, c *config) error {
	return pair.RunMerger(ctx, c.MergerOptions)
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
