// Package report turns engine results into the entries and objects of
// wgpolicyk8s.io PolicyReports (docs/reporting-rules.md, R14-R18): the result fields,
// the summary, and the final report of one resource (name = the resource's
// UID, an ownerReference to it, its scope and tally's labels).
package report
