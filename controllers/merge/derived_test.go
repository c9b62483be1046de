package merge

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// A BackgroundScanReport's results leave out what the merger derives: the
// final report gets the policy's category and severity and the process
// property "background scan"; a result that carries them keeps its own.
func TestFinalReportsGetWhatIntermediateOnesLeaveOut(t *testing.T) {
	m := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{Registry: prometheus.NewRegistry()})
	m.policies = map[string]PolicyInfo{"p": {Background: true, Admission: true, Rules: map[string]bool{"r": true}, Scored: true,
		Category: "Pod Security Standards (Baseline)", Severity: "medium"}}
	m.Upsert(GVRBackgroundScanReport, intermediate("BackgroundScanReport", "h", wgv1alpha2.ResultFail, 10))
	m.mu.Lock()
	st := m.states["u1"]
	in := Input{Policies: m.policies, Background: expand(st.background.results), BackgroundCurrent: true}
	m.mu.Unlock()
	got := Merge(in)
	if len(got) != 1 {
		t.Fatalf("%d results, want 1", len(got))
	}
	r := got[0]
	if r.Category != "Pod Security Standards (Baseline)" || r.Severity != "medium" || r.Properties[report.PropertyProcess] != report.ProcessBackground {
		t.Errorf("final result %+v: want the policy's category and severity, process background scan", r)
	}
	in.Background[0].Category, in.Background[0].Severity = "own", "high"
	if r := Merge(in)[0]; r.Category != "own" || r.Severity != "high" {
		t.Errorf("a result's own category and severity were replaced: %+v", r)
	}
	if err := m.reconcile(context.Background(), "u1"); err != nil {
		t.Fatal(err)
	}
}
