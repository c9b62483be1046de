package merge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
)

// Issue 38: Kyverno 1.19's ValidatingPolicy handler writes its
// EphemeralReport before it answers the API server, so the report can be
// read before its resource is stored; a report of an UPDATE, before the
// update is. Such a report is kept, nothing is merged from it or deleted,
// and it is checked again with backoff until the resource has the content
// (then merged and deleted) or OrphanGrace has passed (then its results
// are those of a resource that never was, and it goes).
func TestAdmissionReportsWaitForTheirResource(t *testing.T) {
	ctx := context.Background()
	stored := podObject("a")
	tests := map[string]struct {
		// report is read before the resource has the content in stored
		report func(t *testing.T) *unstructured.Unstructured
		gvr    schema.GroupVersionResource
		// before is what the API server holds when the report is read
		// (nil: nothing yet, a CREATE not persisted yet).
		before *unstructured.Unstructured
		want   string
	}{
		"a Kyverno EphemeralReport read before its resource is created": {
			report: func(t *testing.T) *unstructured.Unstructured {
				return kyvernoEphemeral("e1", "", "r", wgv1alpha2.ResultFail, 10)
			},
			gvr: apiresources.EphemeralReport, want: "p/r=fail admission review;",
		},
		"tally's AdmissionReport read before its resource is created": {
			report: func(t *testing.T) *unstructured.Unstructured {
				return storedAdmission(intermediate("AdmissionReport", hashOf(t, stored), wgv1alpha2.ResultFail, 10), "u1", "3")
			},
			gvr: apiresources.AdmissionReport, want: "p/r=fail admission review;",
		},
		"tally's AdmissionReport of an UPDATE read before the update is stored": {
			report: func(t *testing.T) *unstructured.Unstructured {
				return storedAdmission(intermediate("AdmissionReport", hashOf(t, stored), wgv1alpha2.ResultFail, 10), "u1", "3")
			},
			gvr: apiresources.AdmissionReport, before: podObject("before-the-update"), want: "p/r=fail admission review;",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			rep := tc.report(t)
			objs := []runtime.Object{rep.DeepCopy()}
			if tc.before != nil {
				objs = append(objs, tc.before.DeepCopy())
			}
			client := fakeClient(objs...)
			m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true, Now: func() time.Time { return now }})
			// Background off: no scan writes a background report to compare with.
			m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
			m.in.Upsert(ctx, tc.gvr, rep)
			for i := range 3 {
				if err := m.reconcile(ctx, "u1"); err != nil {
					t.Fatal(err)
				}
				now = now.Add(recheckDelay(i + 1))
			}
			if got := finalResults(t, m); got != "" {
				t.Fatalf("a final report %q was written before the resource had the admitted content", got)
			}
			if !intermediateExists(t, m, tc.gvr, rep.GetName()) {
				t.Fatal("the admission report was deleted before its resource had the admitted content")
			}
			if got := testutil.ToFloat64(m.st.metrics.rechecks); got != 3 {
				t.Errorf("rechecks = %v, want 3", got)
			}
			// The API server stores the request.
			if tc.before != nil {
				if _, err := client.Resource(configMaps).Namespace("ns").Update(ctx, stored.DeepCopy(), metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := client.Resource(configMaps).Namespace("ns").Create(ctx, stored.DeepCopy(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := m.reconcile(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
			if got := finalResults(t, m); got != tc.want {
				t.Errorf("final %q, want %q", got, tc.want)
			}
			if intermediateExists(t, m, tc.gvr, rep.GetName()) {
				t.Error("the admission report was not deleted once merged")
			}
		})
	}
}

// A report whose resource never comes (a request another webhook denied, or
// that failed to persist) goes once OrphanGrace has passed, unmerged; one
// whose name holds an object of another UID goes at once.
func TestAdmissionReportsOfResourcesThatNeverCameGo(t *testing.T) {
	ctx := context.Background()
	for name, other := range map[string]bool{"never stored": false, "another object of that name": true} {
		t.Run(name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			rep := kyvernoEphemeral("e1", "", "r", wgv1alpha2.ResultFail, 10)
			objs := []runtime.Object{rep.DeepCopy()}
			if other {
				o := podObject("a")
				o.SetUID("another-uid")
				objs = append(objs, o)
			}
			client := fakeClient(objs...)
			m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true, Now: func() time.Time { return now }})
			m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
			m.in.Upsert(ctx, apiresources.EphemeralReport, rep)
			if err := m.reconcile(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
			if !other {
				if !intermediateExists(t, m, apiresources.EphemeralReport, "e1") {
					t.Fatal("deleted within the grace")
				}
				now = now.Add(m.st.opts.OrphanGrace)
				if err := m.reconcile(ctx, "u1"); err != nil {
					t.Fatal(err)
				}
			}
			if intermediateExists(t, m, apiresources.EphemeralReport, "e1") {
				t.Error("the report of a resource that never came was kept")
			}
			if got := finalResults(t, m); got != "" {
				t.Errorf("final %q: results of a resource that never came were merged", got)
			}
		})
	}
}

func TestRecheckDelayBacksOffToItsCap(t *testing.T) {
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, w := range want {
		if got := recheckDelay(i + 1); got != w {
			t.Errorf("recheckDelay(%d) = %s, want %s", i+1, got, w)
		}
	}
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func intermediateExists(t *testing.T, m *Merger, gvr schema.GroupVersionResource, name string) bool {
	t.Helper()
	_, err := m.st.client.Resource(gvr).Namespace("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// Kyverno 1.19 writes a report per handler for one request (the
// ValidatingPolicy handler's before the answer, the classic handlers'
// after): the first may be merged and deleted before the next arrives. The
// next stands for the policies it names, never for the other handler's:
// both handlers' results stay in the final report, through a later
// request's reports too.
func TestOneRequestsReportsFromSeveralHandlersAllCount(t *testing.T) {
	ctx := context.Background()
	stored := podObject("a")
	vp := kyvernoEphemeral("vp", "", "", wgv1alpha2.ResultFail, 10)
	setResult(vp, "vp-audit", "", engine.SourceValidatingPolicy)
	classic := kyvernoEphemeral("classic", "", "require-team", wgv1alpha2.ResultFail, 10)
	client := fakeClient(stored.DeepCopy(), vp.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "require-team"),
		PolicyKey(engine.SourceValidatingPolicy, "vp-audit"): {Admission: true, AnyRule: true, Scored: true}}
	m.in.Upsert(ctx, apiresources.EphemeralReport, vp)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if intermediateExists(t, m, apiresources.EphemeralReport, "vp") {
		t.Fatal("the ValidatingPolicy handler's report was not merged and deleted")
	}
	m.in.Remove(ctx, apiresources.EphemeralReport, vp) // the watch tells the delete
	if _, err := client.Resource(apiresources.EphemeralReport).Namespace("ns").Create(ctx, classic.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.in.Upsert(ctx, apiresources.EphemeralReport, classic)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	const want = "p/require-team=fail admission review;vp-audit/=fail admission review;"
	if got := finalResults(t, m); got != want {
		t.Fatalf("final %q, want %q: the classic handler's report took the ValidatingPolicy's results", got, want)
	}
	// A later request (an UPDATE) whose classic report passes: the
	// ValidatingPolicy's result stays until its own handler's report.
	later := kyvernoEphemeral("later", "", "require-team", wgv1alpha2.ResultPass, 20)
	if _, err := client.Resource(apiresources.EphemeralReport).Namespace("ns").Create(ctx, later.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.in.Upsert(ctx, apiresources.EphemeralReport, later)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	const want2 = "p/require-team=pass admission review;vp-audit/=fail admission review;"
	if got := finalResults(t, m); got != want2 {
		t.Fatalf("after a later request: final %q, want %q", got, want2)
	}
}

// setResult renames the one result of a report.
func setResult(u *unstructured.Unstructured, policy, rule, source string) {
	results, _, _ := unstructured.NestedSlice(u.Object, "spec", "results")
	r := results[0].(map[string]any)
	r["policy"], r["rule"], r["source"] = policy, rule, source
	_ = unstructured.SetNestedSlice(u.Object, results, "spec", "results") // a slice of JSON values always sets
}
