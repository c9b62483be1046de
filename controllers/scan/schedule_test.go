package scan

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

func TestScheduleOf(t *testing.T) {
	tests := map[string]struct {
		annotations map[string]string
		wantErr     bool
		// after is the next scan after 10:02:00 when the last was at 10:00:00.
		next string
	}{
		"global interval":     {nil, false, "11:00:00"},
		"own interval":        {map[string]string{AnnotationInterval: "2s"}, false, "10:00:02"},
		"cron":                {map[string]string{AnnotationSchedule: "*/5 * * * *"}, false, "10:05:00"},
		"bad interval":        {map[string]string{AnnotationInterval: "soon"}, true, ""},
		"negative interval":   {map[string]string{AnnotationInterval: "-1m"}, true, ""},
		"bad cron":            {map[string]string{AnnotationSchedule: "every tuesday"}, true, ""},
		"six-field cron":      {map[string]string{AnnotationSchedule: "0 */5 * * * *"}, true, ""},
		"interval and cron":   {map[string]string{AnnotationInterval: "1m", AnnotationSchedule: "* * * * *"}, true, ""},
		"hourly cron, minute": {map[string]string{AnnotationSchedule: "7 * * * *"}, false, "10:07:00"},
	}
	last := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := scheduleOf(tc.annotations, time.Hour)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got := s.next(last).Format("15:04:05"); got != tc.next {
				t.Errorf("next scan at %s, want %s", got, tc.next)
			}
		})
	}
}

// scheduledScanner is a Scanner with policies but no resources, synced, on
// a fake clock: sched.runDue can be driven step by step.
func scheduledScanner(t *testing.T, now time.Time, schedules map[string]map[string]string) (*Scanner, *clocktesting.FakeClock, *memstore.Store) {
	t.Helper()
	clk := clocktesting.NewFakeClock(now)
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	s := New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), nil, store, Options{Clock: clk, Interval: time.Hour, Registry: prometheus.NewRegistry()})
	for name, annotations := range schedules {
		sched, err := scheduleOf(annotations, s.opts.Interval)
		if err != nil {
			t.Fatal(err)
		}
		s.handlers.policies.put(&trackedPolicy{name: name, compiled: &engine.Policy{Name: name}, schedule: sched, background: true})
	}
	s.handlers.kinds.sources[sourceKey{gvr: apiresources.ClusterPolicy}] = &watch.Source{GVR: apiresources.ClusterPolicy}
	s.handlers.kinds.synced[sourceKey{gvr: apiresources.ClusterPolicy}] = true
	return s, clk, store
}

func lastScan(t *testing.T, store *memstore.Store, policy string) time.Time {
	t.Helper()
	last, err := store.Read().LastScan(policy)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

func TestCronScheduleAfterRestart(t *testing.T) {
	at := func(hms string) time.Time {
		d, _ := time.Parse("15:04:05", hms)
		return time.Date(2026, 1, 1, d.Hour(), d.Minute(), d.Second(), 0, time.UTC)
	}
	s, clk, store := scheduledScanner(t, at("10:02:00"), map[string]map[string]string{"cron": {AnnotationSchedule: "*/5 * * * *"}})
	// The persisted last scan, as read from the state ConfigMap at start-up.
	if err := store.Write(func(w *memstore.WriteTxn) error { return w.SetLastScan("cron", at("10:00:00")) }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []struct {
		now, wantLast string
	}{
		{"10:02:00", "10:00:00"}, // restarted before the next run: no scan (no storm)
		{"10:04:59", "10:00:00"},
		{"10:05:01", "10:05:01"}, // due
		{"10:07:00", "10:05:01"},
		{"10:31:00", "10:31:00"}, // runs missed while down: one catch-up scan
		{"10:32:00", "10:31:00"}, // not one per missed run
		{"10:35:00", "10:35:00"},
	}
	for _, step := range steps {
		clk.SetTime(at(step.now))
		s.sched.runDue(ctx)
		if got := lastScan(t, store, "cron").Format("15:04:05"); got != step.wantLast {
			t.Errorf("at %s: last scan %s, want %s", step.now, got, step.wantLast)
		}
	}
}

func TestIntervalScheduleSpreadsFirstScans(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s, clk, store := scheduledScanner(t, t0, map[string]map[string]string{
		"fast": {AnnotationInterval: "2s"}, "hourly": nil,
	})
	ctx := context.Background()
	s.sched.runDue(ctx)
	// Never scanned: taken as scanned by the initial sync, back-dated by a
	// stable jitter within the period, so policies do not all rescan at once.
	for name, period := range map[string]time.Duration{"fast": 2 * time.Second, "hourly": time.Hour} {
		last := lastScan(t, store, name)
		if last.After(t0) || t0.Sub(last) >= period {
			t.Errorf("%s: first scan time %s, want within %s before %s", name, last, period, t0)
		}
		if want := t0.Add(-jitter(name, period)); !last.Equal(want) {
			t.Errorf("%s: first scan time %s, want %s (stable jitter)", name, last, want)
		}
	}
	hourly := lastScan(t, store, "hourly")
	scans := 0
	prev := lastScan(t, store, "fast")
	for range 10 {
		clk.Step(time.Second)
		s.sched.runDue(ctx)
		if last := lastScan(t, store, "fast"); !last.Equal(prev) {
			if gap := last.Sub(prev); gap < 2*time.Second || gap > 3*time.Second {
				t.Errorf("fast rescanned %s after the previous scan, want 2-3s", gap)
			}
			scans++
			prev = last
		}
	}
	if scans < 4 || scans > 5 {
		t.Errorf("a 2s policy was scanned %d times in 10s, want 4-5", scans)
	}
	if got := lastScan(t, store, "hourly"); !got.Equal(hourly) {
		t.Errorf("the hourly policy was rescanned within 10s: %s -> %s", hourly, got)
	}
}

// A policy's scheduled scan evaluates that policy alone: the stored results
// of the other policies are kept as they are (a full rescan replaces them).
func TestAPolicyScanEvaluatesThatPolicyOnly(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := testScanner(t, Options{Clock: clk, NoPolicyStatus: true})
	s.handlers.kinds.disc = listDiscovery{lists: []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}}}}
	s.handlers.kinds.remember(gvrConfigMaps, "", "ConfigMap")
	s.handlers.kinds.users[gvrConfigMaps] = map[string]bool{"(kept by the test)": true}
	ctx := context.Background()
	work := func() {
		for s.handlers.queue.Len() > 0 {
			if !s.handlers.queue.ProcessNext(ctx, "scan", s.evaluator.reconcile) {
				return
			}
		}
	}
	s.handlers.Upsert(context.Background(), apiresources.ClusterPolicy, churnPolicy("a", "team required (a)"))
	s.handlers.Upsert(context.Background(), apiresources.ClusterPolicy, churnPolicy("b", "team required (b)"))
	settle(t, s)
	s.handlers.upsertResource(context.Background(), gvrConfigMaps, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "ns", "uid": "uid-cm", "resourceVersion": "1"}}})
	work()
	messages := func() map[string]string {
		rs, err := s.handlers.store.Read().Results("uid-cm")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range rs {
			out[r.Value().Policy] = r.Value().Message
		}
		return out
	}
	// Stand-ins for what each policy's last evaluation stored.
	if err := s.handlers.store.Write(func(w *memstore.WriteTxn) error {
		var rs []memstore.Result
		for _, p := range []string{"a", "b"} {
			rs = append(rs, memstore.NewResult(memstore.Entry{Policy: p, Rule: "require-team", Result: "fail", Message: "stale " + p, Source: "kyverno"}, clk.Now()))
		}
		_, err := w.SetResults("uid-cm", rs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.evaluator.scanPolicy(ctx, s.handlers.policies.get("a")); err != nil {
		t.Fatal(err)
	}
	if got := messages(); got["a"] == "stale a" || got["b"] != "stale b" {
		t.Errorf("after a's scan: %v; want a's result recomputed and b's kept", got)
	}
	if err := s.RescanAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := messages(); got["b"] == "stale b" {
		t.Errorf("after a full rescan: %v; want b's result recomputed", got)
	}
}

// The since-last-scan gauge of a policy just evaluated says so, though its
// stored scan time, the base of its schedule, is back-dated by its jitter.
func TestANewPolicysSinceLastScanIsItsFirstEvaluation(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s, clk, store := scheduledScanner(t, t0, map[string]map[string]string{"hourly": nil})
	ctx := context.Background()
	s.sched.runDue(ctx)
	if base := lastScan(t, store, "hourly"); !base.Equal(t0.Add(-jitter("hourly", time.Hour))) {
		t.Fatalf("schedule base %s, want back-dated by the jitter", base)
	}
	clk.Step(5 * time.Second)
	s.sched.runDue(ctx)
	if got := testutil.ToFloat64(s.handlers.metrics.sinceLastScan.WithLabelValues("hourly")); got != 5 {
		t.Errorf("seconds since the last complete scan = %v, want 5 (not the jitter, %v)", got, jitter("hourly", time.Hour).Seconds())
	}
}
