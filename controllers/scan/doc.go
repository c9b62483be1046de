// Package scan is tally's background scanner.
//
// It watches (a streamed watch-list or paged LIST, then WATCH, through
// client-go reflectors that hand each object to memstore as it arrives and
// keep only stubs, with no second informer cache) the ClusterPolicies,
// Policies, PolicyExceptions and Namespaces, the CEL policy kinds and
// labelled ValidatingAdmissionPolicies (with their bindings) when served,
// and every kind that a
// background-enabled validate rule matches, started and stopped as policies
// come and go.
//
// Layers, each holding only those below it (no helper holds a function
// back into one above):
//   - handlers (handlers.go), the watches' sink: they store resources and
//     namespaces in memstore and enqueue them, queue control events, and
//     know what a change enqueues;
//   - the policy reconciler (reconciler.go), the control queue's worker:
//     it applies a policy's, exception's (exceptions.go) or admission
//     policy's (vap.go) change by key, keeps the policy set and the
//     policies' status (status.go), and enqueues what the change concerns;
//   - the evaluator (evaluator.go), the evaluation workers: it evaluates
//     a stored resource (evaluateResource writes nothing), replaces its
//     results in the store, and gives what changed to the result sink
//     (results.go), which the metrics, the Events (events.go) and the
//     report hand-over (reports.go) observe;
//   - the scheduler (schedule.go), which has the evaluator scan a policy
//     when it is due;
//   - the Scanner (scanner.go), which builds them and runs their
//     goroutines until its context ends. One clock (Options.Clock) times
//     everything they wait for.
//
// A new policy kind is a catalog entry (controllers/catalog) and an
// engine call: the layers above take it as any policy.
//
// Queues: policy, exception and binding changes are applied from a control
// queue of their own, one worker, in the order they came (control.go): a
// change that cannot be stored is retried, a complete list applies after the
// events ahead of it. Resources are queued by UID. A resource change (content
// hash without status and metadata noise) enqueues that resource; a policy
// change enqueues only the resources its changed rules can match (rule-level
// hashes, so a status-only update does nothing); an exception change
// enqueues the resources of the policies it names; a namespace-label change
// enqueues the resources of that namespace. Policies are compiled through
// the catalog the admission bridge shares (controllers/catalog).
//
// Reports: one BackgroundScanReport / ClusterBackgroundScanReport per
// resource (name = UID), handed to the merger beside the scanner over
// loopback (controllers/handover), never written to the API server, and only
// when its content (results and resource hash) changed; removed when the
// resource goes. After a restart the results are read back from the final
// reports, so that nothing unchanged is handed over anew.
// Malformed policies (bad pattern, rule that does not compile, bad schedule
// annotation, background rules needing admission data) are skipped with a
// log line, a metric and an Event.
//
// Events: a result that becomes a violation gives the policy and the
// resource a Warning PolicyViolation Event, as Kyverno's background scans
// (reporting controller kyverno-scan); with success events a policy whose
// results on a resource became passes gives the policy a Normal
// PolicyApplied one. A rescan that changes nothing emits nothing. Periodic rescans follow the
// global interval or a policy's scan.tally.dev/interval or
// scan.tally.dev/schedule annotation; each policy's last complete scan is
// persisted in a ConfigMap.
package scan
