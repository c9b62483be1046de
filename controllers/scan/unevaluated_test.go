package scan

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
)

// R46: a policy of a kind Kyverno evaluates and tally does not gets a
// Warning Event naming what tally does not report, once per generation,
// from the replica that keeps the policies' status only.
func TestPoliciesOfKindsTallyDoesNotEvaluateAreTold(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	m := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() float64 { return 0 }, func() float64 { return 0 })
	sink := &unevaluatedSink{recorder: rec, metrics: m}
	gvr := schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "generatingpolicies"}
	mpol := func(generation int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
			"metadata": map[string]any{"name": "check-images", "generation": generation}}}
	}
	ctx := context.Background()
	sink.Upsert(ctx, gvr, mpol(1))
	sink.Replace(ctx, gvr, []*unstructured.Unstructured{mpol(1)}) // a relist: told already
	sink.Upsert(ctx, gvr, mpol(2))
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	if len(events) != 2 {
		t.Fatalf("events = %q, want one per generation (2)", events)
	}
	const want = `Warning PolicyNotEvaluated tally does not evaluate GeneratingPolicy policies: nothing of its own (Kyverno's background controller reports it; tally merges those reports) not reported by tally's background scan`
	if events[0] != want {
		t.Errorf("event = %q\nwant    %q", events[0], want)
	}
	if got := testutil.ToFloat64(m.unevaluated.WithLabelValues("GeneratingPolicy")); got != 2 {
		t.Errorf("%s{kind=GeneratingPolicy} = %v, want 2", metricPoliciesNotEvaluated, got)
	}
	// Another replica (no recorder) says nothing.
	quiet := &unevaluatedSink{metrics: m}
	quiet.Upsert(ctx, gvr, mpol(3))
	if got := testutil.ToFloat64(m.unevaluated.WithLabelValues("GeneratingPolicy")); got != 2 {
		t.Errorf("a replica that does not keep the status counted it: %v", got)
	}
}
