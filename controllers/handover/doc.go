// Package handover passes the scanner's BackgroundScanReports to the merger
// beside it, inside one Pod, without the API server.
//
// The scanner puts each resource's report into a Hub when its content
// changes; the Hub serves them on a loopback port in the Kubernetes
// list/watch wire format (kyverno.io/v2 BackgroundScanReport and
// ClusterBackgroundScanReport), so the merger reads them with the same
// client-go reflector it reads every other kind with, and a user reads
// them with `kubectl --server http://127.0.0.1:<port> get bgscanr -A`.
//
// Resource versions count the Hub's changes from the time it was made; a
// watch from a version
// the Hub no longer holds (or from another incarnation of the scanner) is
// answered 410 Gone, and the client lists again. Lists and initial events
// wait until the scanner has scanned everything once (SetReady): a merger
// never sees a partial set.
package handover
