package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	metricRequests       = "tally_admission_requests_total"
	metricLatency        = "tally_admission_request_duration_seconds"
	metricReportWrites   = "tally_admission_report_writes_total"
	metricIngested       = "tally_admission_ingested_reports_total"
	metricPolicyErrors   = "tally_admission_policy_errors_total"
	metricPendingReports = "tally_admission_pending_reports"
	labelOperation       = "operation"
	labelAllowed         = "allowed"
	labelOp, labelKind   = "op", "kind"
)

type metrics struct {
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	reportWrites *prometheus.CounterVec
	ingested     *prometheus.CounterVec
	policyErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, pending func() float64) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRequests, Help: "Admission requests answered, by operation and whether they were allowed.",
		}, []string{labelOperation, labelAllowed}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricLatency, Help: "Time to answer an admission request, from its body read to its answer written.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{labelOperation}),
		reportWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricReportWrites, Help: "AdmissionReport writes by operation (create, update, conflict, error).",
		}, []string{labelOp}),
		ingested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricIngested, Help: "Kyverno admission reports folded into tally's reports and deleted, by kind.",
		}, []string{labelKind}),
		policyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPolicyErrors, Help: "Policies the admission bridge skipped because they are invalid.",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.reportWrites, m.ingested, m.policyErrors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricPendingReports, Help: "Resources whose admission results wait for the next report flush.",
		}, pending))
	return m
}
