// Package scan is tally's background scanner.
//
// It watches (paged LIST, then WATCH, through client-go reflectors that feed
// memstore directly, with no second informer cache) the ClusterPolicies,
// Policies, PolicyExceptions and Namespaces, and every kind that a
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
// (name = UID, owned by the resource), by server-side apply, only when its
// content changed; deleted when the resource goes. Periodic rescans follow the
// global interval or a policy's scan.tally.dev/interval or
// scan.tally.dev/schedule annotation; each policy's last complete scan is
// persisted in a ConfigMap.
package scan
