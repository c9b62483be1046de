package scan

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
)

// Options configure a Scanner.
type Options struct {
	// Workers evaluate resources in parallel.
	Workers int
	// Interval is the global background scan interval (a policy may override it).
	Interval time.Duration
	// EvalTimeout bounds the evaluation of one resource (DefaultEvalTimeout).
	EvalTimeout time.Duration
	// StateNamespace and StateName locate the ConfigMap that persists each
	// policy's last complete scan.
	StateNamespace, StateName string
	Clock                     clock.WithTicker
	Registry                  prometheus.Registerer
	// Recorder records Warnings about the policies themselves (rejected, a
	// kind discovery does not serve): sharded, the replica keeping their
	// status sets it, the others leave it nil.
	Recorder record.EventRecorder
	// ReadEvents records Warnings about reads this scanner was refused (a
	// kind's list, a policy's data; default: Recorder). Sharded, every
	// replica sets it: each reads its own namespaces, and a read it alone
	// made is seen by no other.
	ReadEvents record.EventRecorder
	// Events, when set, records Events of background results on the
	// policies and resources (events.go); its recorder reports as
	// policyevents.ControllerScan.
	Events *policyevents.Emitter
	// Handover receives the BackgroundScanReports, for the merger beside
	// the scanner (nil: New makes one, read through Scanner.Handover). Run
	// makes it ready once everything was scanned.
	Handover *handover.Hub
	// FinalReports are the final reports the scanner reads its results back
	// from after a restart (default: tally's wgpolicyk8s.io reports).
	FinalReports FinalReports
	// Loader loads the cluster data context entries read (nil: none, they
	// are errors).
	Loader engine.ContextLoader
	// Catalog compiles the policies, shared with the admission bridge so
	// that each version is compiled once (nil: compiled here, unshared).
	Catalog *catalog.Catalog
	// Data serves the cluster reads of CEL policies (nil: none, they are
	// errors).
	Data cel.ClusterData
	// Images verifies the images of verifyImages rules (R41; nil: they
	// are skipped).
	Images engine.ImageVerifier
	// NoPolicyStatus leaves the policies' status alone (beside a Kyverno
	// that writes it); by default tally keeps their Ready condition.
	NoPolicyStatus bool
	// WebhookConfigured, when set, says whether the admission webhook's
	// configuration sends tally the requests of a policy (by report name)
	// at a generation (admission.Bridge.WebhookConfigured). A policy with
	// admission on is marked Ready only once it does, as Kyverno waits for
	// its webhook: a user who creates a resource once the policy is Ready
	// gets its admission result. SetWebhookConfigured sets it after New.
	WebhookConfigured func(policy string, generation int64) bool
	// Shard, when set, is the namespaces this replica scans (its shard of
	// the live scanner pairs: shard.Assignment.Owns; "" stands for the
	// cluster-scoped resources). Only those are watched, held, seeded from
	// the final reports and handed over; nil scans everything.
	Shard func(namespace string) bool
	// StateReadOnly reads the scan state but never writes it (a sharded
	// replica that does not own the cluster-scoped shard: one replica
	// writes it).
	StateReadOnly bool
	// Exceptions says which PolicyExceptions apply, and where (R47).
	Exceptions engine.ExceptionScope
	// MutatingAdmissionPolicyReports scans MutatingAdmissionPolicies with
	// their bindings (R44), as Kyverno's --mutatingAdmissionPolicyReports
	// (off by default, as Kyverno's): where the API server serves them.
	MutatingAdmissionPolicyReports bool
}
