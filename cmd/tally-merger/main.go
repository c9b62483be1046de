// Command tally-merger reconciles AdmissionReports and BackgroundScanReports
// into the final PolicyReports and ClusterPolicyReports.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2/textlogger"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/controllers/shard"
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
	// (paired.Run: under its incarnation).
	base := strings.TrimSuffix(scannerURL, "/")
	p := &paired{merger: merge.New(dyn, mo), scannerURL: base, readyURL: base + "/readyz", shardURL: base + "/shard", client: &http.Client{Timeout: 2 * time.Second}}
	return process.Run(ctx, o, cfg, reg, p, nil)
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

// paired runs the merger while the scanner beside it is ready: it leads
// and has scanned everything. A standby Pod's merger waits (and is ready
// for its probes: it has nothing to sync); when the scanner stops being
// ready (it lost its Lease and exits, or restarts) the merger stops
// writing within readyFailures probes and waits again, then starts afresh.
type paired struct {
	merger     *merge.Merger
	scannerURL string
	readyURL   string
	shardURL   string
	client     *http.Client
	running    atomic.Bool
}

// Probing the scanner beside the merger.
const (
	readyProbeEvery = time.Second
	readyFailures   = 3
)

func (p *paired) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	for {
		log.Info("waiting for the scanner beside the merger to be ready", "url", p.readyURL)
		incarnation, ok := p.waitReady(ctx)
		if !ok {
			return nil
		}
		// The merger merges the namespaces the scanner scans.
		sh, err := p.shard(ctx)
		if err != nil || sh.Incarnation != incarnation {
			if ctx.Err() != nil {
				return nil
			}
			log.Info("the scanner's shard could not be read, or it changed meanwhile: asking again", "error", fmt.Sprint(err))
			time.Sleep(readyProbeEvery)
			continue
		}
		// The hand-over is read under the incarnation: a later run of the
		// scanner (a new shard) answers Gone there rather than its reports.
		bg, err := dynamic.NewForConfig(&rest.Config{Host: p.scannerURL + handover.IncarnationPath(incarnation), QPS: -1})
		if err != nil {
			return fmt.Errorf("--scanner-url: %w", err)
		}
		p.merger.SetBackground(bg)
		if len(sh.Members) > 0 {
			a := shard.Assignment{Self: sh.Self, Members: sh.Members}
			p.merger.SetShard(a.Owns)
			log.Info("merging the scanner's shard", "shard", a.String())
		} else {
			p.merger.SetShard(nil)
		}
		runCtx, cancel := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			p.watchReady(runCtx, cancel, incarnation)
		}()
		p.running.Store(true)
		err = p.merger.Run(runCtx)
		p.running.Store(false)
		cancel()
		<-stopped
		if err != nil || ctx.Err() != nil {
			return err
		}
		log.Info("the scanner beside the merger is not ready any more: merging paused")
	}
}

func (p *paired) Synced() bool { return !p.running.Load() || p.merger.Synced() }

// ready probes the scanner: whether it is ready, and which run of it
// answered (its hand-over's incarnation).
func (p *paired) ready(ctx context.Context) (id string, ok bool) {
	id, ok, _ = p.probe(ctx)
	return id, ok
}

// probe asks the scanner whether it is ready; notReady says it answered
// that it is not (rather than not answering).
func (p *paired) probe(ctx context.Context) (id string, ok, notReady bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.readyURL, nil)
	if err != nil {
		return "", false, false
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return "", false, false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	_ = resp.Body.Close() // read already: a failed close loses nothing
	if err != nil {
		return "", false, false
	}
	if resp.StatusCode != http.StatusOK {
		return "", false, resp.StatusCode == http.StatusServiceUnavailable
	}
	return strings.TrimSpace(strings.TrimPrefix(string(body), "ok")), true, false
}

// waitReady polls until the scanner is ready and returns its incarnation;
// false when ctx ended first.
// shard reads the shard of the scanner beside the merger (handover.Shard).
func (p *paired) shard(ctx context.Context) (handover.Shard, error) {
	var sh handover.Shard
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.shardURL, nil)
	if err != nil {
		return sh, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return sh, err
	}
	defer func() { _ = resp.Body.Close() }() // read already: a failed close loses nothing
	if resp.StatusCode != http.StatusOK {
		return sh, fmt.Errorf("%s: %s", p.shardURL, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&sh)
	return sh, err
}

func (p *paired) waitReady(ctx context.Context) (string, bool) {
	t := time.NewTicker(readyProbeEvery / 2)
	defer t.Stop()
	for {
		if id, ok := p.ready(ctx); ok {
			return id, true
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-t.C:
		}
	}
}

// watchReady calls stop after readyFailures failed probes in a row, or at
// once when another run of the scanner answers (one that restarted between
// two probes): the merger then starts afresh from what that run scanned.
func (p *paired) watchReady(ctx context.Context, stop context.CancelFunc, incarnation string) {
	t := time.NewTicker(readyProbeEvery)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, ok, notReady := p.probe(ctx)
		if (ok && id != incarnation) || notReady {
			// A new run of the scanner (a restart, or a new shard), or one
			// that says it is not ready (its shard is changing): stop
			// writing at once.
			stop()
			return
		}
		if ok {
			failures = 0
			continue
		}
		if failures++; failures >= readyFailures && ctx.Err() == nil {
			stop()
			return
		}
	}
}
