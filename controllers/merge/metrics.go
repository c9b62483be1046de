package merge

import "github.com/prometheus/client_golang/prometheus"

// Metric names.
const (
	metricWrites     = "tally_merge_report_writes_total"
	metricQueueDepth = "tally_merge_queue_depth"
	metricOrphans    = "tally_merge_orphaned_reports_deleted_total"
	metricChecks     = "tally_merge_orphan_checks_total"
	metricUnusable   = "tally_merge_unusable_reports_total"
	metricWithheld   = "tally_merge_admission_results_withheld_total"
	metricPanics     = "tally_merge_worker_panics_total"
	metricDropped    = "tally_merge_report_writes_dropped_total"
	metricMerged     = "tally_merge_admission_reports_deleted_total"
	metricRechecks   = "tally_merge_admission_rechecks_total"
	metricPutRight   = "tally_merge_reports_put_right_total"
)

type metrics struct {
	writes     *prometheus.CounterVec
	queueDepth prometheus.GaugeFunc
	orphans    *prometheus.CounterVec
	checks     *prometheus.CounterVec
	unusable   prometheus.Counter
	withheld   *prometheus.CounterVec
	panics     prometheus.CounterFunc
	dropped    *prometheus.CounterVec
	merged     *prometheus.CounterVec
	rechecks   prometheus.Counter
	putRight   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, queueLen, panics func() float64) *metrics {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricWrites, Help: "Final report writes by operation (create, update, delete).",
		}, []string{"operation"}),
		queueDepth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricQueueDepth, Help: "Resources waiting to be merged.",
		}, queueLen),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricOrphans, Help: "Intermediate reports deleted because their resource no longer exists, by kind.",
		}, []string{"resource"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricChecks, Help: "Orphan checks of a resource by outcome (alive, gone, unknown: its reports are kept).",
		}, []string{"outcome"}),
		unusable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricUnusable, Help: "Intermediate reports ignored because they name no resource of their namespace.",
		}),
	}
	m.withheld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricWithheld, Help: "Merges that left out admission results because they were computed on other content than the resource has (a forged or failed request, or a change the scan has not caught up with), by reason.",
	}, []string{"reason"})
	m.panics = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: metricPanics, Help: "Merges that panicked (the resource is retried after 30 s or more) and watch deliveries that panicked (the object is skipped), recovered; the merger goes on.",
	}, panics)
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricDropped, Help: "Final report writes the API server refused for good (namespace gone or terminating, invalid, forbidden, kind not served), dropped rather than retried, by reason.",
	}, []string{"reason"})
	m.merged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricMerged, Help: "AdmissionReports deleted once the final report held them, by kind (their results stay in the final report).",
	}, []string{"resource"})
	m.rechecks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricRechecks, Help: "Checks of an admission report's resource that found it not stored yet, or not with the admitted content yet: the report is kept and checked again with backoff, within --orphan-grace.",
	})
	m.putRight = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPutRight, Help: "Final reports someone else edited, created or deleted, which the merger puts right (R48), by what was done.",
	}, []string{"change"})
	reg.MustRegister(m.writes, m.queueDepth, m.orphans, m.checks, m.unusable, m.withheld, m.panics, m.dropped, m.merged, m.rechecks, m.putRight)
	return m
}
