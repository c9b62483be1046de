// Package churn holds what the policy-churn memory tests of the scanner and
// the merger share: the simulated duration and the live heap.
package churn

import (
	"os"
	"runtime"
	"strconv"
	"testing"
)

// Hours is the simulated duration of a churn test: TALLY_CHURN_HOURS, 1 by
// default (docs/reliability.md reports 24).
func Hours(t testing.TB) int {
	t.Helper()
	v := os.Getenv("TALLY_CHURN_HOURS")
	if v == "" {
		return 1
	}
	h, err := strconv.Atoi(v)
	if err != nil || h < 1 {
		t.Fatalf("TALLY_CHURN_HOURS=%q: want a whole number of hours, 1 or more", v)
	}
	return h
}

// LiveHeap is the live heap after a full collection.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
