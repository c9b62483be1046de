package merge

import "github.com/prometheus/client_golang/prometheus"

// Metric names.
const (
	metricWrites     = "tally_merge_report_writes_total"
	metricQueueDepth = "tally_merge_queue_depth"
)

type metrics struct {
	writes     *prometheus.CounterVec
	queueDepth prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, queueLen func() float64) *metrics {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricWrites, Help: "Final report writes by operation (create, update, delete).",
		}, []string{"operation"}),
		queueDepth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricQueueDepth, Help: "Resources waiting to be merged.",
		}, queueLen),
	}
	reg.MustRegister(m.writes, m.queueDepth)
	return m
}
