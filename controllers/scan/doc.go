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
// Queue key: resource UID. A resource change (content hash without status
// and metadata noise) enqueues that resource; a policy change enqueues only
// the resources its changed rules can match (rule-level hashes, so a
// status-only update does nothing); an exception change enqueues the
// resources of the policies it names; a namespace-label change enqueues the
// resources of that namespace.
//
// Writes: one BackgroundScanReport / ClusterBackgroundScanReport per resource
// (name = UID, owned by the resource), created then replaced by a JSON patch
// (cheaper for the API server than server-side apply), only when its content
// (spec and resource-hash label) changed; deleted when the resource goes.
// Malformed policies (bad pattern, rule that does not compile, bad schedule
// annotation, background rules needing admission data) are skipped with a
// log line, a metric and an Event. A report write the API server refuses for
// good (namespace gone or terminating, invalid, forbidden, kind not served)
// is dropped with one log line and a metric, and the same content is not
// written again before the next periodic scan; other API errors are retried
// with the queue's exponential backoff.
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
