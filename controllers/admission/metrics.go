package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	metricRequests       = "tally_admission_requests_total"
	metricLatency        = "tally_admission_request_duration_seconds"
	metricReportWrites   = "tally_admission_report_writes_total"
	metricPolicyErrors   = "tally_admission_policy_errors_total"
	metricPendingReports = "tally_admission_pending_reports"
	metricDropped        = "tally_admission_report_batches_dropped_total"
	metricEvalPanics     = "tally_admission_evaluation_panics_total"
	metricEvalRefused    = "tally_admission_evaluations_refused_total"
	metricPruned         = "tally_admission_report_sections_pruned_total"
	metricLeftToScan     = "tally_admission_results_left_to_scan_total"
	labelReason          = "reason"
	labelOperation       = "operation"
	labelAllowed         = "allowed"
	labelOp              = "op"
)

// metrics are the webhook's.
type metrics struct {
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	policyErrors prometheus.Counter
	// evalPanics counts policy evaluations that panicked (recovered);
	// evalRefused the requests answered unevaluated because the evaluation
	// pool was full (pool.go).
	evalPanics, evalRefused prometheus.Counter
	// leftToScan counts the admission results not written because the
	// background scan recomputes them (coverage.go).
	leftToScan prometheus.Counter
}

// recorderMetrics are the report writer's.
type recorderMetrics struct {
	reportWrites *prometheus.CounterVec
	dropped      *prometheus.CounterVec
	// pruned counts the sections of admission results dropped from reports
	// (sections.go), by reason.
	pruned *prometheus.CounterVec
}

func newRecorderMetrics(reg prometheus.Registerer, pending func() float64) *recorderMetrics {
	m := &recorderMetrics{
		reportWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricReportWrites, Help: "AdmissionReport writes by operation (create, update, conflict, error).",
		}, []string{labelOp}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricDropped, Help: "Batches of admission results given up, by reason (namespace-gone, invalid, forbidden, kind-not-served, attempts, panicked, overflow).",
		}, []string{labelReason}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPruned, Help: "Sections of admission results (the results of one content hash) dropped from AdmissionReports, by reason (content-gone: the resource no longer has that content; overflow: too many sections).",
		}, []string{labelReason}),
	}
	reg.MustRegister(m.reportWrites, m.dropped, m.pruned,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricPendingReports, Help: "Resources whose admission results wait for the next report flush.",
		}, pending))
	return m
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRequests, Help: "Admission requests answered, by operation and whether they were allowed.",
		}, []string{labelOperation, labelAllowed}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricLatency, Help: "Time to answer an admission request, from its body read to its answer written.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{labelOperation}),
		policyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPolicyErrors, Help: "Policies the admission bridge skipped because they are invalid.",
		}),
		evalPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricEvalPanics, Help: "Policy evaluations of admission requests that panicked: answered per the policy's failurePolicy, the webhook went on.",
		}),
		evalRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricEvalRefused, Help: "Admission requests answered unevaluated, per failurePolicy, because every evaluation slot was busy.",
		}),
		leftToScan: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricLeftToScan, Help: "Admission results not written to an AdmissionReport because the background scan recomputes them (policies with background on, kinds the scanner reads).",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.policyErrors, m.evalPanics, m.evalRefused, m.leftToScan)
	return m
}
