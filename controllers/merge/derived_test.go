package merge

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// A BackgroundScanReport's results leave out what the merger derives: the
// final report gets the policy's category and severity and the process
// property "background scan"; a result that carries them keeps its own.
func TestFinalReportsGetWhatIntermediateOnesLeaveOut(t *testing.T) {
	m := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{Registry: prometheus.NewRegistry()})
	m.st.policies = map[string]PolicyInfo{"p": {Background: true, Admission: true, Rules: map[string]bool{"r": true}, Scored: true,
		Category: "Pod Security Standards (Baseline)", Severity: "medium"}}
	m.in.Upsert(context.Background(), apiresources.BackgroundScanReport, intermediate("BackgroundScanReport", "h", wgv1alpha2.ResultFail, 10))
	m.st.mu.Lock()
	st := m.st.states["u1"]
	in := Input{Policies: m.st.policies, Background: expand(st.background.results), BackgroundCurrent: true}
	m.st.mu.Unlock()
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

// Entries written by tally's scanner carry no timestamp and no scored: the
// final report takes the times from the report's annotation and scored
// from the policy. An entry left without a time (a malformed annotation)
// takes the report's creation time, never none.
func TestFinalReportsGetTheTimesAndScoredOfSlimEntries(t *testing.T) {
	m := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{Registry: prometheus.NewRegistry()})
	m.st.policies = map[string]PolicyInfo{
		"p": {Background: true, Admission: true, Rules: map[string]bool{"r": true, "s": true}, Scored: true},
		"q": {Background: true, Admission: true, Rules: map[string]bool{"r": true}, Scored: false},
	}
	bsr := func(annotation string) *unstructured.Unstructured {
		u := intermediate("BackgroundScanReport", "h", wgv1alpha2.ResultPass, 0)
		u.Object["spec"].(map[string]any)["results"] = []any{
			map[string]any{"source": "kyverno", "policy": "p", "rule": "r", "result": "pass", "message": "ok"},
			map[string]any{"source": "kyverno", "policy": "p", "rule": "s", "result": "fail", "message": "no"},
			map[string]any{"source": "kyverno", "policy": "q", "rule": "r", "result": "warn", "message": "no"},
		}
		u.SetAnnotations(map[string]string{report.AnnotationChangedAt: annotation})
		u.SetCreationTimestamp(metav1.Unix(1700000000, 0))
		return u
	}
	final := func() map[string]wgv1alpha2.PolicyReportResult {
		m.st.mu.Lock()
		defer m.st.mu.Unlock()
		out := map[string]wgv1alpha2.PolicyReportResult{}
		for _, r := range Merge(Input{Policies: m.st.policies, Background: expand(m.st.states["u1"].background.results), BackgroundCurrent: true}) {
			out[r.Policy+"/"+r.Rule] = r
		}
		return out
	}
	m.in.Upsert(context.Background(), apiresources.BackgroundScanReport, bsr("1795577752.596752795,1795577800"))
	got := final()
	want := map[string]metav1.Timestamp{"p/r": {Seconds: 1795577752, Nanos: 596752795}, "p/s": {Seconds: 1795577800}, "q/r": {Seconds: 1795577800}}
	for k, ts := range want {
		if got[k].Timestamp != ts {
			t.Errorf("%s: timestamp %v, want %v", k, got[k].Timestamp, ts)
		}
	}
	if !got["p/r"].Scored || !got["p/s"].Scored || got["q/r"].Scored {
		t.Errorf("scored: p/r %v, p/s %v, q/r %v; want the policies' (true, true, false)", got["p/r"].Scored, got["p/s"].Scored, got["q/r"].Scored)
	}
	m.in.Upsert(context.Background(), apiresources.BackgroundScanReport, bsr("1795577752,x"))
	got = final()
	if got["p/r"].Timestamp.Seconds != 1795577752 || got["p/s"].Timestamp.Seconds != 1700000000 || got["q/r"].Timestamp.Seconds != 1700000000 {
		t.Errorf("malformed annotation: times %v %v %v, want the readable one, then the creation time", got["p/r"].Timestamp, got["p/s"].Timestamp, got["q/r"].Timestamp)
	}
}
