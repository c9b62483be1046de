package merge

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tally-dev/tally/report"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// fieldManager is the merger's field manager in every write.
const fieldManager = "tally-merger"

// Options configure a Merger.
type Options struct {
	Workers  int
	Filter   Filter
	Registry prometheus.Registerer
	// Mapper finds the resource type of a report's resource when the report
	// has no audit.kyverno.io/resource.gvr label (nil: such reports are
	// never checked for orphans).
	Mapper meta.RESTMapper
	// RESTConfig, when set, is used to apply final reports without decoding
	// the API server's answers (final.go); the dynamic client otherwise.
	RESTConfig *rest.Config
	// OrphanGrace, OrphanRecheck and OrphanQPS bound the orphan check
	// (orphan.go); OrphanTick is how often candidates are looked for.
	OrphanGrace, OrphanRecheck, OrphanTick time.Duration
	OrphanQPS                              float64
	// Key signs the final reports the merger writes (AnnotationSignature),
	// so that one read back at start-up counts only when the merger wrote
	// its content (R48). LegacySeeds also trusts, by their managedFields,
	// the unsigned reports of a version that did not sign (the key was made
	// by this start: none can be signed yet). Without a key (unit tests)
	// nothing is signed and every report is read back as with LegacySeeds.
	Key         []byte
	LegacySeeds bool
	// Now is the clock (default time.Now); Clock its tickers (default the
	// real clock; set with Now when a test fakes the time).
	Now   func() time.Time
	Clock clock.WithTicker
	// ManagedBy is the value of the app.kubernetes.io/managed-by label of
	// the final reports written, and the one the merger selects its own by
	// at start-up (default report.ManagedBy, "tally"). Beside Kyverno it is
	// "kyverno", so that Kyverno's tooling finds the reports.
	ManagedBy string
	// ReportAPI is the API the final reports are written in (default
	// wgpolicyk8s.io PolicyReports; openreports.io Reports).
	ReportAPI report.API
	// Background reads the BackgroundScanReports: the scanner's hand-over
	// beside the merger (handover.Hub, on loopback). Nil reads them from the
	// API server, as the client does everything else.
	Background dynamic.Interface
	// Shard, when set, is the namespaces this merger merges and writes ("":
	// the cluster-scoped reports): its scanner pair's shard
	// (shard.Assignment.Owns). Reports of other namespaces are neither
	// read back, merged, written nor deleted. Nil merges everything.
	Shard func(namespace string) bool
	// Metadata, when set, watches the final reports' metadata (selected by
	// ManagedBy), so that one someone else edits, creates or deletes is put
	// right within seconds (owned.go, R48); nil: they are put right at
	// their resource's next change or a restart.
	Metadata metadata.Interface
	// Ingest makes the merger read the admission reports of a Kyverno
	// admission controller beside it (EphemeralReports, and kyverno.io
	// AdmissionReports of Kyverno 1.10-1.12) and merge them, with tally's
	// own, as each resource's admission results, deleting each once merged
	// (fold.go).
	Ingest bool
}

// Defaults of the orphan check.
const (
	DefaultOrphanGrace   = 2 * time.Minute
	DefaultOrphanRecheck = time.Hour
	DefaultOrphanQPS     = 10
)
