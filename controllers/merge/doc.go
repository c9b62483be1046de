// Package merge is tally's merger: it reconciles a resource's AdmissionReport
// and BackgroundScanReport into its final PolicyReport or ClusterPolicyReport.
//
// The decision is one pure function, Merge (the reporting matrix, newest-wins,
// removal of stale results, scored/warn, filters), table-tested without a
// cluster.
package merge
