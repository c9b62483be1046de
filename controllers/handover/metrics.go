package handover

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	puts, deletes prometheus.Counter
	snapshots     prometheus.Counter
	snapshotSize  prometheus.Gauge
	expired       prometheus.Counter
}

// newMetrics registers the hand-over metrics (on reg, when not nil).
func newMetrics(reg prometheus.Registerer, h *Hub) *metrics {
	m := &metrics{
		puts: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_handover_puts_total",
			Help: "BackgroundScanReports handed to the merger because their content changed (created or replaced)."}),
		deletes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_handover_deletes_total",
			Help: "BackgroundScanReports withdrawn (their resource is gone or has no result left)."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_handover_snapshots_total",
			Help: "Complete lists served (a merger starting, or one that fell behind the changes kept)."}),
		snapshotSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_handover_snapshot_reports",
			Help: "Reports in the last complete list served."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_handover_watch_expired_total",
			Help: "Watches answered Gone: they resumed from a version no longer held, and list again."}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.puts, m.deletes, m.snapshots, m.snapshotSize, m.expired,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_handover_reports",
			Help: "BackgroundScanReports the scanner holds for the merger."}, func() float64 { return float64(h.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_handover_watchers",
			Help: "Open watches of the hand-over (the merger holds two)."}, func() float64 { n, _ := h.watchState(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_handover_lag_changes",
			Help: "Changes made that the slowest open watch has not been sent yet."}, func() float64 { _, lag := h.watchState(); return float64(lag) }),
	)
	return m
}
