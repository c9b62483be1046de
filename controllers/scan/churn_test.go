package scan

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/internal/churn"
)

// listDiscovery serves a fixed list of resources.
type listDiscovery struct {
	discovery.DiscoveryInterface
	lists []*metav1.APIResourceList
}

func (d listDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return d.lists, nil
}

func churnPolicy(name, message string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
		"metadata": map[string]any{"name": name, "resourceVersion": "1"},
		"spec": map[string]any{"rules": []any{map[string]any{
			"name":     "require-team",
			"match":    map[string]any{"any": []any{map[string]any{"resources": map[string]any{"kinds": []any{"ConfigMap"}}}}},
			"validate": map[string]any{"message": message, "pattern": map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "?*"}}}},
		}}},
	}}
}

// TestPolicyChurnLeavesMemoryFlat simulates policy churn against the
// scanner: every simulated minute a policy is created, one is edited and
// one deleted (about ten live at any time, each with results on every
// resource), and the queue is worked off. The live heap after the churn
// must stay near what it was before. TALLY_CHURN_HOURS sets the simulated
// hours (default 1; docs/reliability.md reports 24).
func TestPolicyChurnLeavesMemoryFlat(t *testing.T) {
	hours := churn.Hours(t)
	const resources, live = 100, 10
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := testScanner(t, Options{Clock: clk, NoPolicyStatus: true})
	s.handlers.kinds.disc = listDiscovery{lists: []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}}}}
	s.handlers.kinds.remember(gvrConfigMaps, "", "ConfigMap")
	s.handlers.kinds.users[gvrConfigMaps] = map[string]bool{"(kept by the test)": true} // no source is started
	ctx := context.Background()
	fake := s.client.(*dynamicfake.FakeDynamicClient)
	work := func() {
		for s.handlers.queue.Len() > 0 {
			if !s.handlers.queue.ProcessNext(ctx, "scan", s.evaluator.reconcile) {
				return
			}
		}
		fake.ClearActions() // the fake API server logs every call: not the scanner's memory
	}
	for i := range resources {
		s.handlers.upsertResource(context.Background(), gvrConfigMaps, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%03d", i), "namespace": "churn", "uid": fmt.Sprintf("uid-%03d", i), "resourceVersion": "1"}}})
	}
	minute := 0
	step := func() {
		s.handlers.Upsert(context.Background(), apiresources.ClusterPolicy, churnPolicy(fmt.Sprintf("churn-%d", minute), fmt.Sprintf("team label required (created minute %d)", minute)))
		if minute >= live/2 {
			n := minute - live/2
			s.handlers.Upsert(context.Background(), apiresources.ClusterPolicy, churnPolicy(fmt.Sprintf("churn-%d", n), fmt.Sprintf("team label required (edited minute %d)", minute)))
		}
		if minute >= live {
			s.handlers.Remove(context.Background(), apiresources.ClusterPolicy, churnPolicy(fmt.Sprintf("churn-%d", minute-live), ""))
		}
		settle(t, s)
		work()
		clk.Step(time.Minute)
		minute++
	}
	for range 2 * live { // warm up to the steady state
		step()
	}
	before := churn.LiveHeap()
	series := testutil.CollectAndCount(s.handlers.metrics.results)
	start := time.Now()
	for range hours * 60 {
		step()
	}
	after := churn.LiveHeap()
	runtime.KeepAlive(s)
	n, _ := s.handlers.store.Read().CountResults("fail")
	t.Logf("%d simulated hours: %d policies created, edited and deleted in %s; live heap %.1f MiB before, %.1f MiB after (%+.1f%%); %d fail results, %d result series",
		hours, hours*60, time.Since(start).Round(time.Millisecond), mib(before), mib(after), 100*(float64(after)-float64(before))/float64(before), n, testutil.CollectAndCount(s.handlers.metrics.results))
	if n != resources*live {
		t.Errorf("%d fail results, want %d", n, resources*live)
	}
	if got := testutil.CollectAndCount(s.handlers.metrics.results); got != series {
		t.Errorf("%d result series after the churn, %d before", got, series)
	}
	if after > before+before/4+1<<20 {
		t.Errorf("the live heap grew from %.1f to %.1f MiB", mib(before), mib(after))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
