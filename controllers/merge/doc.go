// Package merge is tally's merger: it reconciles a resource's AdmissionReport
// and BackgroundScanReport into its final PolicyReport or ClusterPolicyReport.
//
// The decision is one pure function, Merge (the reporting matrix, newest-wins,
// removal of stale results, scored/warn, filters), table-tested without a
// cluster.
//
// The Merger watches the policies and the four intermediate kinds (lists
// streamed, so a large kind is never held whole), keeps per resource UID only
// what Merge needs (compact results, state.go; of an AdmissionReport, its
// sections by content hash, verify.go), and, its queue keyed by resource
// UID, writes the final report (a create, or a JSON patch of what changed)
// only when its content differs from what it wrote or found at start-up,
// and deletes it when no result remains. It merges nothing until every kind was listed once,
// so a restart writes nothing when nothing changed. Intermediate reports of
// resources that no longer exist and that the garbage collector cannot see
// (no ownerReference) are found and deleted by a rate-limited check
// (orphan.go).
//
// The Merger runs these in layers, each calling only those beneath it
// (Merger's comment names them and their files): no file of the package
// uses a name of a file above it.
package merge
