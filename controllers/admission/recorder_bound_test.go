package admission

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

func TestAFullRecorderHandsNewResourcesToARescan(t *testing.T) {
	var rescanned []string
	r := NewRecorder(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), RecorderOptions{MaxPending: 2,
		OnOverflow: func(uid string) { rescanned = append(rescanned, uid) }})
	add := func(uid string) {
		r.add(&entry{uid: uid, namespace: "ns", results: []wgv1alpha2.PolicyReportResult{{Policy: "p", Rule: "r", Result: "pass"}}})
	}
	add("a")
	add("b")
	add("a") // merged into what waits: no growth
	add("c") // full
	if n := r.pendingCount(); n != 2 {
		t.Errorf("%d resources pending, want the bound 2", n)
	}
	if len(rescanned) != 1 || rescanned[0] != "c" {
		t.Errorf("handed to a rescan: %v, want [c]", rescanned)
	}
	if n := testutil.ToFloat64(r.metrics.dropped.WithLabelValues(dropOverflow)); n != 1 {
		t.Errorf("dropped{overflow} = %v, want 1", n)
	}
}
