package scan

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

func TestADeletedPolicyLeavesNoSeries(t *testing.T) {
	p := namedPodsPolicy(t)
	s := testScanner(t, Options{}, p)
	s.handlers.kinds.sources[sourceKey{gvr: apiresources.Namespace}] = &watch.Source{} // listed: Synced holds once the queue is idle
	for i := range 3 {
		pod := benchPod(t, i)
		s.handlers.upsertResource(context.Background(), gvrPods, pod)
		if err := s.evaluator.reconcile(context.Background(), string(pod.GetUID())); err != nil {
			t.Fatal(err)
		}
	}
	drain(s)
	if err := s.handlers.store.Write(func(w *memstore.WriteTxn) error { return w.SetLastScan("p", time.Now().Add(-time.Minute)) }); err != nil {
		t.Fatal(err)
	}
	s.handlers.metrics.policyErrors.WithLabelValues("p", "invalid").Inc() // rejected once, before
	s.sched.runDue(context.Background())
	if got := testutil.ToFloat64(s.handlers.metrics.results.WithLabelValues("p", "named", "pass")); got != 3 {
		t.Fatalf("results{p,named,pass} = %v, want 3", got)
	}
	if n := testutil.CollectAndCount(s.handlers.metrics.sinceLastScan); n != 1 {
		t.Fatalf("%d seconds-since-last-scan series, want 1", n)
	}

	s.handlers.Remove(context.Background(), apiresources.ClusterPolicy, &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "p"}}})
	settle(t, s)
	drain(s)
	s.sched.runDue(context.Background())
	if n := testutil.CollectAndCount(s.handlers.metrics.results); n != 0 {
		t.Errorf("%d results series left, want 0", n)
	}
	if n := testutil.CollectAndCount(s.handlers.metrics.sinceLastScan); n != 0 {
		t.Errorf("%d seconds-since-last-scan series left, want 0", n)
	}
	if n := testutil.CollectAndCount(s.handlers.metrics.policyErrors); n != 0 {
		t.Errorf("%d policy-error series left, want 0", n)
	}
}

// namedPodsPolicy is a ClusterPolicy p whose one rule, named, passes every
// Pod with a name.
func namedPodsPolicy(t *testing.T) *engine.Policy {
	t.Helper()
	return compiledPolicy(t, `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: named
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`)
}
