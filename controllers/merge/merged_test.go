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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// storedAdmission is an AdmissionReport as the API server holds it.
func storedAdmission(u *unstructured.Unstructured, uid, rv string) *unstructured.Unstructured {
	u = u.DeepCopy()
	u.SetUID(types.UID("ar-" + uid))
	u.SetResourceVersion(rv)
	return u
}

// finalResults reads the final report of u1 as "policy/rule=result process".
func finalResults(t *testing.T, m *Merger) string {
	t.Helper()
	got, err := m.st.client.Resource(apiresources.PolicyReport).Namespace("ns").Get(context.Background(), "u1", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var r wgv1alpha2.PolicyReport
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &r); err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, e := range r.Results {
		s += e.Policy + "/" + e.Rule + "=" + string(e.Result) + " " + e.Properties[report.PropertyProcess] + ";"
	}
	return s
}

func admissionReportExists(t *testing.T, m *Merger) bool {
	t.Helper()
	_, err := m.st.client.Resource(apiresources.AdmissionReport).Namespace("ns").Get(context.Background(), "u1", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// R20: once the final report holds an AdmissionReport's results, the
// AdmissionReport is deleted; results a scan cannot recompute (background:
// false) stay in the final report through later merges, a forged review
// (other content) does not erase them, and a restarted merger reads them
// back from the final report and writes nothing.
func TestMergedAdmissionReportsGoAndTheirResultsStay(t *testing.T) {
	stored := podObject("a")
	current, other := hashOf(t, stored), hashOf(t, podObject("forged"))
	genuine := storedAdmission(intermediate("AdmissionReport", current, fail, 10), "1", "5")
	client := fakeClient(stored.DeepCopy(), genuine.DeepCopy())
	now := time.Unix(1000, 0)
	m := New(client, Options{Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }})
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")} // admission only: no scan recomputes it
	ctx := context.Background()
	const want = "p/r=fail admission review;"

	m.in.Upsert(ctx, apiresources.AdmissionReport, genuine)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != want {
		t.Fatalf("final %q, want %q", got, want)
	}
	if admissionReportExists(t, m) {
		t.Fatal("the AdmissionReport outlived its merge")
	}
	if got := testutil.ToFloat64(m.st.metrics.merged.WithLabelValues("admissionreports")); got != 1 {
		t.Errorf("merged = %v, want 1", got)
	}
	// The watch tells the delete; a later merge (another policy's change)
	// keeps the results and writes nothing.
	m.in.Remove(ctx, apiresources.AdmissionReport, genuine)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != want {
		t.Fatalf("after the delete: final %q, want %q", got, want)
	}

	// A forged review: a new report of made-up content. It withholds, is
	// kept while the scan could still catch up, and then goes; the
	// genuine result stays.
	forged := storedAdmission(intermediate("AdmissionReport", other, pass, 20), "2", "9")
	if _, err := client.Resource(apiresources.AdmissionReport).Namespace("ns").Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.in.Upsert(ctx, apiresources.AdmissionReport, forged)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != want {
		t.Fatalf("after a forged review: final %q, want %q", got, want)
	}
	if !admissionReportExists(t, m) {
		t.Fatal("a report whose section did not count went before the scan could catch up")
	}
	now = now.Add(DefaultOrphanGrace)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if admissionReportExists(t, m) {
		t.Fatal("the forged review's report outlived the grace")
	}
	if got := finalResults(t, m); got != want {
		t.Fatalf("after the forged report went: final %q, want %q", got, want)
	}
	writes := testutil.ToFloat64(m.st.metrics.writes.WithLabelValues("create")) + testutil.ToFloat64(m.st.metrics.writes.WithLabelValues("update"))
	if writes != 1 {
		t.Errorf("%v final report writes, want 1", writes)
	}

	// A restarted merger: no AdmissionReport left, the result read back.
	checkRestartWritesNothing(t, client, Options{Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }}, m.st.policies, want)
}

// checkRestartWritesNothing starts a merger afresh on client, as after a
// restart once every kind is listed: the final report of u1 must read want,
// and nothing be written.
func checkRestartWritesNothing(t *testing.T, client dynamic.Interface, opts Options, policies map[string]PolicyInfo, want string) {
	t.Helper()
	ctx := context.Background()
	restarted := New(client, opts)
	if err := restarted.seed(ctx); err != nil {
		t.Fatal(err)
	}
	restarted.st.policies = policies
	restarted.st.mu.Lock()
	restarted.st.seedAdmission() // once every kind is listed
	restarted.st.mu.Unlock()
	if err := restarted.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, restarted); got != want {
		t.Fatalf("after a restart: final %q, want %q", got, want)
	}
	if got := testutil.ToFloat64(restarted.st.metrics.writes.WithLabelValues("update")) + testutil.ToFloat64(restarted.st.metrics.writes.WithLabelValues("delete")); got != 0 {
		t.Errorf("a restart with nothing changed wrote %v times", got)
	}
}

// Admission results superseded by newer background results are not kept:
// the AdmissionReport goes and nothing of it stays in memory.
func TestSupersededAdmissionResultsAreNotKept(t *testing.T) {
	stored := podObject("a")
	current := hashOf(t, stored)
	ar := storedAdmission(intermediate("AdmissionReport", current, pass, 10), "1", "5")
	client := fakeClient(stored.DeepCopy(), ar.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry()})
	m.st.policies = map[string]PolicyInfo{"p": pol(true, true, "r")}
	ctx := context.Background()
	m.in.Upsert(ctx, apiresources.AdmissionReport, ar)
	m.in.Upsert(ctx, apiresources.BackgroundScanReport, intermediate("BackgroundScanReport", current, fail, 20))
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != "p/r=fail background scan;" {
		t.Fatalf("final %q", got)
	}
	if admissionReportExists(t, m) {
		t.Fatal("the AdmissionReport outlived its merge")
	}
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if m.st.states["u1"].admission.present {
		t.Error("superseded admission results are kept")
	}
}

// A kept admission result whose resource is gone is dropped by the orphan
// check (its AdmissionReport is gone already: nothing else would tell).
func TestRetainedAdmissionResultsOfAGoneResourceAreDropped(t *testing.T) {
	stored := podObject("a")
	ar := storedAdmission(intermediate("AdmissionReport", hashOf(t, stored), fail, 10), "1", "5")
	client := fakeClient(stored.DeepCopy(), ar.DeepCopy())
	now := time.Unix(1000, 0)
	m := New(client, Options{Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }})
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
	ctx := context.Background()
	m.in.Upsert(ctx, apiresources.AdmissionReport, ar)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if err := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("ns").Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(DefaultOrphanGrace)
	cands := m.orph.orphanCandidates(now)
	if len(cands) != 1 {
		t.Fatalf("%d orphan candidates, want the resource with kept results", len(cands))
	}
	if err := m.orph.checkOrphan(ctx, cands[0]); err != nil {
		t.Fatal(err)
	}
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if m.st.states["u1"] != nil {
		t.Error("the kept results of a gone resource stay")
	}
}

// Sections of earlier content (the history of updates, older than the
// section that counts) never count again: they do not hold the report back.
func TestHistorySectionsDoNotHoldAReportBack(t *testing.T) {
	stored := podObject("a")
	current, earlier := hashOf(t, stored), hashOf(t, podObject("before"))
	ar := storedAdmission(withSections(intermediate("AdmissionReport", current, fail, 20), earlier, pass, 10), "1", "5")
	client := fakeClient(stored.DeepCopy(), ar.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry()})
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
	ctx := context.Background()
	m.in.Upsert(ctx, apiresources.AdmissionReport, ar)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != "p/r=fail admission review;" {
		t.Fatalf("final %q", got)
	}
	if admissionReportExists(t, m) {
		t.Fatal("an AdmissionReport with only older sections besides the one that counts was kept")
	}
}

// A restarted merger keeps, from the final reports, the results no scan
// recomputes: those of policies with background off, whatever their process
// property says (Kyverno derives it from the policy's background setting),
// and those marked as admission results; not the background ones.
func TestSeedKeepsTheResultsNoScanRecomputes(t *testing.T) {
	s := report.Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "app", UID: "u1"}
	withProcess := func(r wgv1alpha2.PolicyReportResult, p string) wgv1alpha2.PolicyReportResult {
		r.Properties = map[string]string{report.PropertyProcess: p}
		return r
	}
	polr, _ := report.Final(s, []wgv1alpha2.PolicyReportResult{
		withProcess(res("admission-only", "r", fail, 10), report.ProcessBackground), // Kyverno's label for it
		withProcess(res("both", "r", pass, 11), report.ProcessAdmission),
		withProcess(res("both", "other", fail, 12), report.ProcessBackground),
	})
	polr.Labels[report.LabelManagedBy] = report.ManagedBy
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(polr)
	if err != nil {
		t.Fatal(err)
	}
	m := New(fakeClient(&unstructured.Unstructured{Object: obj}), Options{Registry: prometheus.NewRegistry()})
	if err := m.seed(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	m.st.policies = map[string]PolicyInfo{"admission-only": pol(false, true, "r"), "both": pol(true, true, "r", "other")}
	m.st.seedAdmission()
	st := m.st.states["u1"]
	if st == nil || !st.admission.retained {
		t.Fatalf("no kept admission results: %+v", st)
	}
	got := map[string]bool{}
	for _, r := range st.admission.results {
		got[r.meta.policy+"/"+r.meta.rule] = true
	}
	if len(got) != 2 || !got["admission-only/r"] || !got["both/r"] {
		t.Errorf("kept %v, want admission-only/r and both/r", got)
	}
}

// A merger that starts while a forged review's AdmissionReport is in the
// API server (the genuine one merged and deleted before) keeps the genuine
// result read back from the final report.
func TestSeededResultsSurviveAForgedReportFoundAtStartUp(t *testing.T) {
	stored := podObject("a")
	other := hashOf(t, podObject("forged"))
	s := report.Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "app", UID: "u1"}
	genuine := res("p", "r", fail, 10)
	genuine.Properties = map[string]string{report.PropertyProcess: report.ProcessAdmission}
	polr, _ := report.Final(s, []wgv1alpha2.PolicyReportResult{genuine})
	polr.Labels[report.LabelManagedBy] = report.ManagedBy
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(polr)
	if err != nil {
		t.Fatal(err)
	}
	forged := storedAdmission(intermediate("AdmissionReport", other, pass, 20), "2", "9")
	client := fakeClient(stored.DeepCopy(), forged.DeepCopy(), &unstructured.Unstructured{Object: obj})
	m := New(client, Options{Registry: prometheus.NewRegistry()})
	ctx := context.Background()
	if err := m.seed(ctx); err != nil {
		t.Fatal(err)
	}
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
	m.in.Upsert(ctx, apiresources.AdmissionReport, forged) // listed before the policies are all in
	m.st.mu.Lock()
	m.st.seedAdmission()
	m.st.mu.Unlock()
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != "p/r=fail admission review;" {
		t.Fatalf("final %q, want the genuine fail", got)
	}
}

// Issue 39: a forged review reusing a real UID writes a report of made-up
// content; deleting that report (by anyone who may) before the merger does
// must not take the genuine results retained from an earlier merge.
func TestDeletingAForgedReportKeepsTheRetainedGenuineResults(t *testing.T) {
	stored := podObject("a")
	current, other := hashOf(t, stored), hashOf(t, podObject("forged"))
	for name, kind := range map[string]string{"tally's AdmissionReport": "AdmissionReport", "Kyverno's EphemeralReport": "EphemeralReport"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			gvr := apiresources.AdmissionReport
			genuine := storedAdmission(intermediate("AdmissionReport", current, fail, 10), "1", "5")
			forged := storedAdmission(intermediate("AdmissionReport", other, pass, 20), "2", "9")
			forged.SetName("forged")
			if kind == "EphemeralReport" {
				gvr = apiresources.EphemeralReport
				genuine = kyvernoEphemeral("genuine", "", "r", fail, 10)
				forged = kyvernoEphemeral("forged", "", "r", pass, 20)
			}
			client := fakeClient(stored.DeepCopy(), genuine.DeepCopy())
			m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: kind == "EphemeralReport"})
			m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
			m.in.Upsert(ctx, gvr, genuine)
			if err := m.reconcile(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
			const want = "p/r=fail admission review;"
			if got := finalResults(t, m); got != want {
				t.Fatalf("final %q, want %q", got, want)
			}
			m.in.Remove(ctx, gvr, genuine) // merged and deleted by the merger
			if kind == "EphemeralReport" {
				// Beside Kyverno results carry no content hash: a later
				// report of the same policy stands for it (fold.go). The
				// forged one is deleted before it is merged.
				m.in.Upsert(ctx, gvr, forged)
				m.in.Remove(ctx, gvr, forged)
			} else {
				m.in.Upsert(ctx, gvr, forged)
				m.in.Remove(ctx, gvr, forged) // deleted by someone else, before its merge
			}
			if err := m.reconcile(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
			if got := finalResults(t, m); got != want {
				t.Errorf("after a forged report came and was deleted: final %q, want %q", got, want)
			}
		})
	}
}
