package scan

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/memstore"
)

// Metric names.
const (
	metricResults              = "tally_scan_results"
	metricScanDuration         = "tally_scan_duration_seconds"
	metricResources            = "tally_scan_resources_processed_total"
	metricQueueDepth           = "tally_scan_queue_depth"
	metricSinceLastScan        = "tally_scan_seconds_since_last_complete_scan"
	metricReportWrites         = "tally_scan_report_writes_total"
	metricPolicyErrors         = "tally_scan_policy_errors_total"
	metricKindErrors           = "tally_scan_kind_errors_total"
	metricExceptionsIgnored    = "tally_scan_exceptions_ignored_total"
	metricPoliciesNotEvaluated = "tally_scan_policies_not_evaluated_total"
	metricStoredResources      = "tally_scan_stored_resources"
	metricEvalPanics           = "tally_scan_evaluation_panics_total"
	metricEvalDeadlines        = "tally_scan_evaluation_deadline_exceeded_total"
	metricWorkerPanics         = "tally_scan_worker_panics_total"
	labelPolicy, labelRule     = "policy", "rule"
	labelResult, labelOp       = "result", "operation"
	labelReason, labelKind     = "reason", "kind"
)

type metrics struct {
	results *prometheus.GaugeVec
	// series counts the results behind each series of results (policy,
	// rule, result): one at zero is deleted (countResults).
	seriesMu sync.Mutex
	series   map[[3]string]int
	// sinceSeries are the policies with a sinceLastScan series, deleted
	// when the policy is no longer scanned (runDueScans).
	sinceSeries map[string]bool

	scanDuration  prometheus.Histogram
	resources     prometheus.Counter
	queueDepth    prometheus.GaugeFunc
	sinceLastScan *prometheus.GaugeVec
	reportWrites  *prometheus.CounterVec
	policyErrors  *prometheus.CounterVec
	kindErrors    *prometheus.CounterVec
	stored        prometheus.GaugeFunc
	// evalPanics counts rules whose evaluation panicked (evaluate.go);
	// workerPanics the reconciles that panicked elsewhere (the queue);
	// evalDeadlines the evaluations cut by their deadline.
	evalPanics, evalDeadlines prometheus.Counter
	workerPanics              prometheus.CounterFunc
	// exceptionsIgnored counts PolicyExceptions outside
	// --exception-namespace (R47).
	exceptionsIgnored prometheus.Counter
	// unevaluated counts the policies (versions) of kinds tally does not
	// evaluate, by kind (R46).
	unevaluated *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, queueLen, storedLen, workerPanics func() float64) *metrics {
	m := &metrics{
		series: map[[3]string]int{}, sinceSeries: map[string]bool{},
		results: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricResults, Help: "Current background-scan results by policy, rule and result.",
		}, []string{labelPolicy, labelRule, labelResult}),
		scanDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricScanDuration, Help: "Time to evaluate one resource against the policies.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}),
		resources: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricResources, Help: "Resources evaluated.",
		}),
		queueDepth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricQueueDepth, Help: "Resources waiting to be evaluated.",
		}, queueLen),
		sinceLastScan: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricSinceLastScan, Help: "Seconds since each policy's last complete background scan.",
		}, []string{labelPolicy}),
		reportWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricReportWrites, Help: "BackgroundScanReports handed over to the merger by operation (create, update, delete).",
		}, []string{labelOp}),
		policyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPolicyErrors, Help: "Policies rejected (invalid pattern, cron, background with userInfo, ...).",
		}, []string{labelPolicy, labelReason}),
		kindErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricKindErrors, Help: "Kinds that could not be listed or watched.",
		}, []string{labelKind}),
		stored: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricStoredResources, Help: "Resources held in the store.",
		}, storedLen),
		evalPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricEvalPanics, Help: "Rules whose evaluation panicked: each gave an error result, and the scanner went on.",
		}),
		evalDeadlines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricEvalDeadlines, Help: "Resource evaluations cut by their deadline (--evaluation-timeout); the rules left gave error results.",
		}),
		workerPanics: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metricWorkerPanics, Help: "Reconciles that panicked outside evaluation (the resource is retried after 30 s or more) and watch deliveries that panicked (the object is skipped), recovered.",
		}, workerPanics),
	}
	m.exceptionsIgnored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricExceptionsIgnored, Help: "PolicyExceptions (created or changed) ignored because their namespace is not --exception-namespace.",
	})
	m.unevaluated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPoliciesNotEvaluated, Help: "Policies (each version once) of kinds Kyverno evaluates and tally does not (GeneratingPolicy and its namespaced kind), by kind: told in a PolicyNotEvaluated Event.",
	}, []string{"kind"})
	reg.MustRegister(m.results, m.scanDuration, m.resources, m.queueDepth, m.sinceLastScan,
		m.reportWrites, m.policyErrors, m.kindErrors, m.stored,
		m.evalPanics, m.evalDeadlines, m.workerPanics, m.exceptionsIgnored, m.unevaluated)
	return m
}

// countResults moves the results gauge (R31) by delta for each result. A
// series whose count falls to zero is deleted: a deleted policy or rule, or
// a result value no resource has any more, leaves no series behind.
func (m *metrics) count(results []memstore.Result, delta int) {
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	for _, r := range results {
		e := r.Value()
		k := [3]string{e.Policy, e.Rule, string(e.Result)}
		n := m.series[k] + delta
		if n <= 0 {
			delete(m.series, k)
			m.results.DeleteLabelValues(k[0], k[1], k[2])
			continue
		}
		m.series[k] = n
		m.results.WithLabelValues(k[0], k[1], k[2]).Set(float64(n))
	}
}
