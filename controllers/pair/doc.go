// Package pair runs the two sides of a scanner pair, the two containers
// of one Pod: RunScanner, the scanner process (the background scan of its
// shard or, unsharded, of everything while leading; the admission bridge;
// the hand-over the merger reads), owning every goroutine it starts; and
// Follower, the merger side, which merges only while that scanner is
// ready, the namespaces of its shard, from the hand-over of the scanner's
// current run.
package pair
