package scan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// A report write the API server refuses for good is dropped (counted by
// reason, not returned, so the queue does not retry it) and the same content
// is not written again before the next periodic scan; a new content is
// written at once. Other failures are returned, for the queue to retry.
func TestRefusedReportWritesAreNotRetriedHot(t *testing.T) {
	gr := schema.GroupResource{Group: "kyverno.io", Resource: "backgroundscanreports"}
	terminating := apierrors.NewForbidden(gr, "uid-1", errors.New("namespace ns is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	tests := map[string]struct {
		err     error
		refused string // "" when the error is returned
	}{
		"the namespace is terminating": {terminating, watch.RefusedNamespaceGone},
		"the namespace is gone":        {apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"), watch.RefusedNamespaceGone},
		"the report is invalid":        {apierrors.NewInvalid(schema.GroupKind{Group: "kyverno.io", Kind: "BackgroundScanReport"}, "uid-1", nil), watch.RefusedInvalid},
		"the write is forbidden":       {apierrors.NewForbidden(gr, "uid-1", errors.New("no")), watch.RefusedForbidden},
		"a timeout is retried":         {apierrors.NewServerTimeout(gr, "create", 1), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
			creates := 0
			client.PrependReactor("create", "backgroundscanreports", func(clienttesting.Action) (bool, runtime.Object, error) {
				creates++
				return true, nil, tc.err
			})
			reg := prometheus.NewRegistry()
			m := newMetrics(reg, func() float64 { return 0 }, func() float64 { return 0 }, func() float64 { return 0 })
			clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
			w := newReportWriter(client, m, clk, time.Hour)
			res := memstore.NewResource("uid-1", "", "v1", "Pod", "ns", "p", "1", 1, []byte(`{}`))
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			failing := []memstore.Result{result("p", "r", "fail", "m")}
			ctx := context.Background()

			err := w.ensure(ctx, res, gvr, failing)
			if tc.refused == "" {
				if err == nil || creates != 1 {
					t.Fatalf("a transient failure: err %v after %d creates, want it returned", err, creates)
				}
				if err := w.ensure(ctx, res, gvr, failing); err == nil || creates != 2 {
					t.Errorf("retry: err %v after %d creates, want a second attempt", err, creates)
				}
				if got := testutil.CollectAndCount(m.reportsDropped); got != 0 {
					t.Errorf("%d dropped series for a transient failure", got)
				}
				return
			}
			if err != nil || creates != 1 {
				t.Fatalf("err %v after %d creates, want nil after 1", err, creates)
			}
			if got := testutil.ToFloat64(m.reportsDropped.WithLabelValues(tc.refused)); got != 1 {
				t.Errorf("dropped{%s} = %v, want 1", tc.refused, got)
			}
			for range 3 { // rescans, queue retries: nothing new to write
				if err := w.ensure(ctx, res, gvr, failing); err != nil {
					t.Fatal(err)
				}
			}
			if creates != 1 || testutil.ToFloat64(m.reportsDropped.WithLabelValues(tc.refused)) != 1 {
				t.Errorf("the same content was written %d times, dropped %v times; want once", creates, testutil.ToFloat64(m.reportsDropped.WithLabelValues(tc.refused)))
			}
			if err := w.ensure(ctx, res, gvr, []memstore.Result{result("p", "r", "pass", "ok")}); err != nil || creates != 2 {
				t.Errorf("a new content: err %v, %d creates, want a second write at once", err, creates)
			}
			clk.SetTime(clk.Now().Add(time.Hour))
			if err := w.ensure(ctx, res, gvr, []memstore.Result{result("p", "r", "pass", "ok")}); err != nil || creates != 3 {
				t.Errorf("at the next periodic scan: err %v, %d creates, want a third write", err, creates)
			}
		})
	}
}

// A BackgroundScanReport holds what the merger cannot derive: its entries
// carry no timestamp and no scored, the entries are one annotation and the
// times another. A
// restarted scanner reads the times back exactly (nanoseconds included), so
// the same results are recognised and not written again.
func TestBackgroundReportsCarryTheirTimesInOneAnnotation(t *testing.T) {
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.BackgroundScanReport: "BackgroundScanReportList", apiresources.ClusterBackgroundScanReport: "ClusterBackgroundScanReportList"})
	writes := 0
	client.PrependReactor("*", "backgroundscanreports", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "create" || a.GetVerb() == "patch" {
			writes++
		}
		return false, nil, nil
	})
	newWriter := func() *reportWriter {
		m := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() float64 { return 0 }, func() float64 { return 0 })
		return newReportWriter(client, m, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), time.Hour)
	}
	early, late := time.Unix(1795577752, 596752795), time.Unix(1795577800, 0)
	results := []memstore.Result{
		memstore.NewResult(memstore.Entry{Policy: "a", Rule: "r", Result: "pass", Message: "ok", Source: "kyverno"}, early),
		memstore.NewResult(memstore.Entry{Policy: "b", Rule: "r", Result: "fail", Message: "no", Source: "kyverno", Properties: `{"control":"x"}`}, late),
		memstore.NewResult(memstore.Entry{Policy: "c", Rule: "r", Result: "pass", Message: "ok", Source: "kyverno"}, early),
	}
	res := memstore.NewResource("uid-1", "", "v1", "Pod", "ns", "p", "1", 1, []byte(`{}`))
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	ctx := context.Background()
	if err := newWriter().ensure(ctx, res, gvr, results); err != nil || writes != 1 {
		t.Fatalf("first write: %v after %d writes", err, writes)
	}
	got, err := client.Resource(apiresources.BackgroundScanReport).Namespace("ns").Get(ctx, "uid-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
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

	restarted := newWriter()
	seeded, err := restarted.seed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ts := seeded["uid-1"][1].Timestamp; ts.Seconds != late.Unix() || ts.Nanos != 0 {
		t.Errorf("seeded time of entry 1: %v", ts)
	}
	if ts := seeded["uid-1"][2].Timestamp; ts.Seconds != early.Unix() || ts.Nanos != int32(early.Nanosecond()) {
		t.Errorf("seeded time of entry 2: %v", ts)
	}
	if err := restarted.ensure(ctx, res, gvr, results); err != nil || writes != 1 {
		t.Errorf("after a restart the same results were written again: %v, %d writes", err, writes)
	}
	moved := slices.Clone(results)
	moved[0] = memstore.NewResult(results[0].Value(), early.Add(time.Nanosecond))
	if err := restarted.ensure(ctx, res, gvr, moved); err != nil || writes != 2 {
		t.Errorf("a changed time was not written: %v, %d writes", err, writes)
	}
	// That write was a patch: the spec it set is the report's spec.
	patched, err := client.Resource(apiresources.BackgroundScanReport).Namespace("ns").Get(ctx, "uid-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := unstructured.NestedString(patched.Object, "spec", "owner", "uid"); uid != "uid-1" {
		t.Errorf("patched spec %v, want the owner uid-1", patched.Object["spec"])
	}
}

// Results too large to pack in an annotation are written as spec.results
// entries, and read back from there.
func TestBackgroundReportsTooLargeToPackKeepTheirEntries(t *testing.T) {
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.BackgroundScanReport: "BackgroundScanReportList", apiresources.ClusterBackgroundScanReport: "ClusterBackgroundScanReportList"})
	m := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() float64 { return 0 }, func() float64 { return 0 })
	w := newReportWriter(client, m, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), time.Hour)
	long := strings.Repeat("x", 1000)
	var results []memstore.Result
	for i := range 200 { // 200 KB of messages: past report.MaxPackedResults
		results = append(results, memstore.NewResult(memstore.Entry{Policy: fmt.Sprintf("p%03d", i), Rule: "r", Result: "fail", Message: long, Source: "kyverno"}, time.Unix(1795577752, 0)))
	}
	res := memstore.NewResource("uid-1", "", "v1", "Pod", "ns", "p", "1", 1, []byte(`{}`))
	ctx := context.Background()
	if err := w.ensure(ctx, res, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, results); err != nil {
		t.Fatal(err)
	}
	got, err := client.Resource(apiresources.BackgroundScanReport).Namespace("ns").Get(ctx, "uid-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.GetAnnotations()[report.AnnotationResults]; ok {
		t.Errorf("results of %d bytes were packed", 200*len(long))
	}
	if spec, _, _ := unstructured.NestedSlice(got.Object, "spec", "results"); len(spec) != 200 {
		t.Errorf("spec.results has %d entries, want 200", len(spec))
	}
	seeded, err := newReportWriter(client, m, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), time.Hour).seed(ctx)
	if err != nil || len(seeded["uid-1"]) != 200 {
		t.Errorf("seeded %d results (%v), want 200", len(seeded["uid-1"]), err)
	}
}
