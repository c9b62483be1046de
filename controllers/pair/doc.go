// Package pair holds what ties a merger to the scanner beside it in one
// Pod (issue 41's pair): Follower, the merger side, which merges only
// while that scanner is ready, the namespaces of its shard, from the
// hand-over of the scanner's current run.
package pair
