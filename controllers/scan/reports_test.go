package scan

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

func newTestWriter(client *dynfake.FakeDynamicClient) (*reportWriter, *handover.Hub, *metrics) {
	m := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() float64 { return 0 }, func() float64 { return 0 })
	hub := handover.New(handover.Options{})
	return newReportWriter(client, hub, m, FinalReports{}, nil), hub, m
}

func handedOver(t *testing.T, hub *handover.Hub, ns, name string) *unstructured.Unstructured {
	t.Helper()
	body, ok := hub.Get(ns, name)
	if !ok {
		t.Fatalf("no report %s/%s handed over", ns, name)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(body); err != nil {
		t.Fatal(err)
	}
	return &u
}

// A report is handed over when its content changes, not when a rescan finds
// the same results, and withdrawn when no result is left.
func TestReportsAreHandedOverOnlyWhenTheyChange(t *testing.T) {
	w, hub, m := newTestWriter(dynfake.NewSimpleDynamicClient(runtime.NewScheme()))
	res := memstore.NewResource("uid-1", "", "v1", "Pod", "ns", "p", "1", 1, []byte(`{}`))
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	ctx := context.Background()
	failing := []memstore.Result{result("p", "r", "fail", "m")}
	for range 3 {
		if err := w.ensure(ctx, res, gvr, failing); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(m.reportWrites.WithLabelValues("create")); got != 1 || hub.Len() != 1 {
		t.Fatalf("%v creates, %d reports held; want 1 and 1", got, hub.Len())
	}
	if err := w.ensure(ctx, res, gvr, []memstore.Result{result("p", "r", "pass", "ok")}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.reportWrites.WithLabelValues("update")); got != 1 {
		t.Fatalf("%v updates, want 1", got)
	}
	if err := w.ensure(ctx, res, gvr, nil); err != nil {
		t.Fatal(err)
	}
	if hub.Len() != 0 || testutil.ToFloat64(m.reportWrites.WithLabelValues("delete")) != 1 {
		t.Fatalf("%d reports held after the results went", hub.Len())
	}
}

// A BackgroundScanReport holds what the merger cannot derive: its entries
// carry no timestamp and no scored, the entries are one annotation and the
// times another. A
// restarted scanner reads the times back exactly (nanoseconds included), so
// the same results are recognised and not written again.
func TestBackgroundReportsCarryTheirTimesInOneAnnotation(t *testing.T) {
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.PolicyReport: "PolicyReportList", apiresources.ClusterPolicyReport: "ClusterPolicyReportList"})
	w, hub, _ := newTestWriter(client)
	early, late := time.Unix(1795577752, 596752795), time.Unix(1795577800, 0)
	results := []memstore.Result{
		memstore.NewResult(memstore.Entry{Policy: "a", Rule: "r", Result: "pass", Message: "ok", Source: "kyverno"}, early),
		memstore.NewResult(memstore.Entry{Policy: "b", Rule: "r", Result: "fail", Message: "no", Source: "kyverno", Properties: `{"control":"x"}`}, late),
		memstore.NewResult(memstore.Entry{Policy: "c", Rule: "r", Result: "pass", Message: "ok", Source: "kyverno"}, early),
	}
	res := memstore.NewResource("uid-1", "", "v1", "Pod", "ns", "p", "1", 1, []byte(`{}`))
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	ctx := context.Background()
	if err := w.ensure(ctx, res, gvr, results); err != nil {
		t.Fatal(err)
	}
	got := handedOver(t, hub, "ns", "uid-1")
	if v := got.GetAnnotations()[report.AnnotationChangedAt]; v != "1795577752.596752795,1795577800,1795577752.596752795" {
		t.Errorf("annotation %q", v)
	}
	if spec, _, _ := unstructured.NestedSlice(got.Object, "spec", "results"); len(spec) != 0 {
		t.Errorf("spec.results has %d entries, want none (they are packed)", len(spec))
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(got.GetAnnotations()[report.AnnotationResults]), &entries); err != nil {
		t.Fatalf("annotation %s: %v", report.AnnotationResults, err)
	}
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3", len(entries))
	}
	for _, e := range entries {
		if _, ok := e["timestamp"]; ok {
			t.Errorf("entry %v has a timestamp", e)
		}
		if _, ok := e["scored"]; ok {
			t.Errorf("entry %v has scored", e)
		}
		if e["source"] != "kyverno" || e["policy"] == "" || e["result"] == "" || e["message"] == "" {
			t.Errorf("entry %v lacks what the merger cannot derive", e)
		}
	}
}

// After a restart the scanner reads its results back from the final
// reports: the background ones, with their times exactly (nanoseconds
// included), a warn the merger made of an unscored fail as the fail it was,
// and not the admission results (the merger keeps those).
func TestSeedReadsBackgroundResultsFromTheFinalReports(t *testing.T) {
	final := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
		"metadata": map[string]any{"name": "uid-1", "namespace": "ns", "labels": map[string]any{report.LabelManagedBy: report.ManagedBy}},
		"scope":    map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns", "uid": "uid-1"},
		"results": []any{
			map[string]any{"policy": "a", "rule": "r", "result": "pass", "source": "kyverno", "scored": true, "timestamp": map[string]any{"seconds": int64(1795577752), "nanos": int64(596752795)},
				"properties": map[string]any{"process": "background scan"}},
			map[string]any{"policy": "b", "rule": "r", "result": "warn", "source": "kyverno", "scored": false, "timestamp": map[string]any{"seconds": int64(1795577800)},
				"properties": map[string]any{"process": "background scan", "control": "x"}},
			map[string]any{"policy": "c", "rule": "r", "result": "fail", "source": "kyverno", "scored": true, "timestamp": map[string]any{"seconds": int64(1795577800)},
				"properties": map[string]any{"process": "admission review"}},
		},
	}}
	other := final.DeepCopy()
	other.SetName("uid-2")
	other.SetLabels(map[string]string{report.LabelManagedBy: "someone-else"})
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.PolicyReport: "PolicyReportList", apiresources.ClusterPolicyReport: "ClusterPolicyReportList",
		apiresources.Namespace: "NamespaceList"}, watch.WithNamespaces(final, other)...)
	w, _, _ := newTestWriter(client)
	seeded, err := seedAll(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(seeded) != 1 || len(seeded["uid-1"]) != 2 {
		t.Fatalf("seeded %v, want the two background results of uid-1", seeded)
	}
	a, b := seeded["uid-1"][0], seeded["uid-1"][1]
	if a.Timestamp.Seconds != 1795577752 || a.Timestamp.Nanos != 596752795 {
		t.Errorf("time of a: %v", a.Timestamp)
	}
	if b.Result != "fail" || b.Properties["control"] != "x" {
		t.Errorf("b: %+v, want the fail the scan made", b)
	}
	if got := w.known(); len(got) != 1 || got[0] != "uid-1" {
		t.Errorf("known %v: a seeded resource is checked for orphans", got)
	}
}

// Results too large to pack in an annotation are written as spec.results
// entries, and read back from there.
func TestBackgroundReportsTooLargeToPackKeepTheirEntries(t *testing.T) {
	w, hub, _ := newTestWriter(dynfake.NewSimpleDynamicClient(runtime.NewScheme()))
	long := strings.Repeat("x", 1000)
	var results []memstore.Result
	for i := range 200 { // 200 KB of messages: past report.MaxPackedResults
		results = append(results, memstore.NewResult(memstore.Entry{Policy: fmt.Sprintf("p%03d", i), Rule: "r", Result: "fail", Message: long, Source: "kyverno"}, time.Unix(1795577752, 0)))
	}
	res := memstore.NewResource("uid-1", "", "v1", "Pod", "ns", "p", "1", 1, []byte(`{}`))
	if err := w.ensure(context.Background(), res, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, results); err != nil {
		t.Fatal(err)
	}
	got := handedOver(t, hub, "ns", "uid-1")
	if _, ok := got.GetAnnotations()[report.AnnotationResults]; ok {
		t.Errorf("results of %d bytes were packed", 200*len(long))
	}
	if spec, _, _ := unstructured.NestedSlice(got.Object, "spec", "results"); len(spec) != 200 {
		t.Errorf("spec.results has %d entries, want 200", len(spec))
	}
}

// seedAll is what w.seed hands over, page after page, in one map.
func seedAll(w *reportWriter) (map[string][]wgv1alpha2.PolicyReportResult, error) {
	all := map[string][]wgv1alpha2.PolicyReportResult{}
	n, err := w.seed(context.Background(), func(page map[string][]wgv1alpha2.PolicyReportResult) error {
		maps.Copy(all, page)
		return nil
	})
	if err == nil && n != len(all) {
		err = fmt.Errorf("seed counted %d reports, handed over %d", n, len(all))
	}
	return all, err
}

// A seed tried again (the API server failed part-way) stores a report's
// results again without counting them twice.
func TestASeedTriedAgainCountsEachResultOnce(t *testing.T) {
	s := testScanner(t, Options{})
	page := map[string][]wgv1alpha2.PolicyReportResult{"uid-1": {
		{Policy: "p", Rule: "r", Result: wgv1alpha2.ResultFail, Source: "kyverno"},
		{Policy: "p", Rule: "q", Result: wgv1alpha2.ResultPass, Source: "kyverno"},
	}}
	for range 2 {
		if err := s.evaluator.seedResults(page); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(s.handlers.metrics.results.WithLabelValues("p", "r", "fail")); n != 1 {
		t.Errorf("fail results counted %v, want 1", n)
	}
	if got, _ := s.handlers.store.Read().Results("uid-1"); len(got) != 2 {
		t.Errorf("%d results stored, want 2", len(got))
	}
}
