package merge

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/internal/churn"
	"github.com/tally-dev/tally/report"
)

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

// scanReport is the BackgroundScanReport of ConfigMap i with one fail
// entry per policy, each with a message of its own.
func scanReport(i int, policies []string, minute int) *unstructured.Unstructured {
	uid := fmt.Sprintf("uid-%03d", i)
	results := make([]any, 0, len(policies))
	for _, p := range policies {
		results = append(results, map[string]any{
			"source": "kyverno", "policy": p, "rule": "require-team", "result": "fail", "scored": true,
			"message":    fmt.Sprintf("validation error: ConfigMap cm-%03d needs a team label (%s, minute %d). rule require-team failed at path /metadata/labels/", i, p, minute),
			"properties": map[string]any{"process": "background scan"},
			"timestamp":  map[string]any{"seconds": int64(minute * 60), "nanos": int64(0)},
		})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kyverno.io/v2", "kind": "BackgroundScanReport",
		"metadata": map[string]any{"name": uid, "namespace": "churn", "uid": "report-" + uid, "resourceVersion": strconv.Itoa(minute),
			"labels": map[string]any{report.LabelResourceUID: uid, report.LabelResourceGVR: "configmaps.v1", report.LabelResourceKind: "ConfigMap"}},
		"spec": map[string]any{
			"owner":   map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": fmt.Sprintf("cm-%03d", i), "uid": uid},
			"results": results,
		},
	}}
}

// TestPolicyChurnLeavesMemoryFlat simulates policy churn against the
// merger: every simulated minute a policy is created, one is edited, one is
// deleted (ten live), and every resource's BackgroundScanReport is
// rewritten with new messages; the queue is worked off. The live heap and
// the intern tables after the churn must stay near what they were before.
// TALLY_CHURN_HOURS sets the simulated hours (default 1; docs/reliability.md
// reports 24).
func TestPolicyChurnLeavesMemoryFlat(t *testing.T) {
	hours := churn.Hours(t)
	const resources, live = 100, 10
	client := dynfake.NewSimpleDynamicClient(k8sruntime.NewScheme())
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := New(client, Options{Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }})
	ctx := context.Background()
	work := func() {
		for m.st.queue.Len() > 0 {
			if !m.st.queue.ProcessNext(ctx, "merge", m.reconcile) {
				return
			}
		}
		client.ClearActions() // the fake API server logs every call: not the merger's memory
	}
	minute := 0
	var names []string
	step := func() {
		name := fmt.Sprintf("churn-%d", minute)
		m.in.Upsert(context.Background(), apiresources.ClusterPolicy, churnPolicy(name, "created"))
		names = append(names, name)
		if len(names) > live/2 {
			m.in.Upsert(context.Background(), apiresources.ClusterPolicy, churnPolicy(names[len(names)-live/2-1], fmt.Sprintf("edited minute %d", minute)))
		}
		if len(names) > live {
			m.in.Remove(context.Background(), apiresources.ClusterPolicy, churnPolicy(names[0], ""))
			names = names[1:]
		}
		for i := range resources {
			m.in.Upsert(context.Background(), apiresources.BackgroundScanReport, scanReport(i, names, minute))
		}
		work()
		now = now.Add(time.Minute)
		minute++
	}
	for range 2 * live {
		step()
	}
	before := churn.LiveHeap()
	m.st.mu.Lock()
	tablesBefore := len(m.st.strings) + len(m.st.metas)
	m.st.mu.Unlock()
	start := time.Now()
	for range hours * 60 {
		step()
	}
	after := churn.LiveHeap()
	m.st.mu.Lock()
	tables, states := len(m.st.strings)+len(m.st.metas), len(m.st.states)
	m.st.mu.Unlock()
	runtime.KeepAlive(m)
	t.Logf("%d simulated hours: %d policies created, edited and deleted, %d report rewrites in %s; live heap %.1f MiB before, %.1f MiB after (%+.1f%%); intern tables %d entries before, %d after",
		hours, hours*60, hours*60*resources, time.Since(start).Round(time.Millisecond),
		mib(before), mib(after), 100*(float64(after)-float64(before))/float64(before), tablesBefore, tables)
	if states != resources {
		t.Errorf("%d resource states, want %d", states, resources)
	}
	if tables > 2*(resources*live+live)+internSlack+100 {
		t.Errorf("the intern tables hold %d entries for %d live results", tables, resources*live)
	}
	if after > before+before/4+1<<20 {
		t.Errorf("the live heap grew from %.1f to %.1f MiB", mib(before), mib(after))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
