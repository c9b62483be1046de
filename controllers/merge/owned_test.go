package merge

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

func managed(entries ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "u1", "namespace": "ns"}}}
	u.SetManagedFields(entries)
	return u
}

func entry(manager string, sec int64) metav1.ManagedFieldsEntry {
	at := metav1.NewTime(time.Unix(sec, 0))
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &at}
}

func TestLastWriter(t *testing.T) {
	for name, tc := range map[string]struct {
		u    *unstructured.Unstructured
		want bool
	}{
		"the merger alone":                          {managed(entry(fieldManager, 10)), true},
		"edited after the merger's write":           {managed(entry(fieldManager, 10), entry("kubectl-edit", 20)), false},
		"the merger wrote after the edit":           {managed(entry("kubectl-edit", 10), entry(fieldManager, 20)), true},
		"created by someone else":                   {managed(entry("kubectl-create", 10)), false},
		"no managedFields: cannot be told, trusted": {managed(), true},
	} {
		if got := lastWriter(tc.u, fieldManager); got != tc.want {
			t.Errorf("%s: lastWriter = %v, want %v", name, got, tc.want)
		}
	}
}

// R48: a final report someone else edits (fail to pass), deletes or
// creates is put right at once; a report of a resource that is gone (the
// garbage collector deleted it) is not written again.
func TestFinalReportsArePutRight(t *testing.T) {
	ctx := context.Background()
	stored := podObject("a")
	bg := intermediate("BackgroundScanReport", hashOf(t, stored), fail, 10)
	client := fakeClient(stored.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry()})
	m.st.policies = map[string]PolicyInfo{"p": pol(true, true, "r")}
	m.in.Upsert(ctx, apiresources.BackgroundScanReport, bg)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	const want = "p/r=fail background scan;"
	if got := finalResults(t, m); got != want {
		t.Fatalf("final %q, want %q", got, want)
	}
	owned := &finalReports{m: m.st, listed: map[schema.GroupVersionResource]bool{}}

	// Edited from fail to pass, its last writer someone else.
	edited := editFinal(t, m, wgv1alpha2.ResultPass)
	edited.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 10), entry("kubectl-edit", 20)})
	owned.Upsert(ctx, apiresources.PolicyReport, edited)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != want {
		t.Errorf("after an edit: final %q, want %q", got, want)
	}

	// Edited again, by a client naming the merger's field manager (issue
	// 53): known by its resourceVersion, not by a name, and put right.
	edited = editFinal(t, m, wgv1alpha2.ResultPass)
	edited.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 40)})
	owned.Upsert(ctx, apiresources.PolicyReport, edited)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != want {
		t.Errorf("after an edit under the merger's field manager: final %q, want %q", got, want)
	}

	// Deleted behind the merger's back: written again.
	if err := client.Resource(apiresources.PolicyReport).Namespace("ns").Delete(ctx, "u1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	owned.Remove(ctx, apiresources.PolicyReport, managed())
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != want {
		t.Errorf("after a delete: final %q, want %q", got, want)
	}

	// Created by someone else for a resource with no results: deleted.
	forged := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
		"metadata": map[string]any{"name": "u2", "namespace": "ns", "labels": map[string]any{report.LabelManagedBy: report.ManagedBy}}}}
	if _, err := client.Resource(apiresources.PolicyReport).Namespace("ns").Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	forged.SetManagedFields([]metav1.ManagedFieldsEntry{entry("kubectl-create", 30)})
	owned.Upsert(ctx, apiresources.PolicyReport, forged)
	if err := m.reconcile(ctx, "u2"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Resource(apiresources.PolicyReport).Namespace("ns").Get(ctx, "u2", metav1.GetOptions{}); err == nil {
		t.Error("a report someone else created was left")
	}

	// The resource is deleted; the garbage collector deletes its report
	// before the scanner's report of it goes: not written again.
	if err := client.Resource(configMaps).Namespace("ns").Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.Resource(apiresources.PolicyReport).Namespace("ns").Delete(ctx, "u1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	owned.Remove(ctx, apiresources.PolicyReport, managed())
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != "" {
		t.Errorf("the report of a deleted resource was written again: %q", got)
	}
	for change, n := range map[string]float64{"edited": 2, "deleted": 2, "created": 1} {
		if got := testutil.ToFloat64(m.st.metrics.putRight.WithLabelValues(change)); got != n {
			t.Errorf("put right %s = %v, want %v", change, got, n)
		}
	}
}

// R48 at start-up: a report edited while tally was down, or whose scope
// names another resource or namespace, is not read back as the merger's
// (its admission results would count as verified): it is written again.
// A time in the future is clamped.
func TestStartUpReadsBackOnlyWhatTheMergerWrote(t *testing.T) {
	ctx := context.Background()
	subject := report.Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "app", UID: "u1"}
	final := func(result wgv1alpha2.Result, sec int64, mutate func(*unstructured.Unstructured)) *unstructured.Unstructured {
		r := res("p", "r", result, sec)
		r.Properties = map[string]string{report.PropertyProcess: report.ProcessAdmission}
		polr, _ := report.Final(subject, []wgv1alpha2.PolicyReportResult{r})
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(polr)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		mutate(u)
		return u
	}
	key := []byte("the merger's key")
	signed := func(u *unstructured.Unstructured) {
		var r wgv1alpha2.PolicyReport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
			t.Fatal(err)
		}
		_, body, _, err := finalBody(report.APIWGPolicy, subject, r.Results, report.ManagedBy)
		if err != nil {
			t.Fatal(err)
		}
		u.SetAnnotations(map[string]string{AnnotationSignature: signature(key, body)})
	}
	for name, tc := range map[string]struct {
		report  *unstructured.Unstructured
		key     []byte
		legacy  bool
		trusted bool
	}{
		"signed by the merger": {report: final(fail, 10, func(u *unstructured.Unstructured) {
			signed(u)
			u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 10)})
		}), key: key, trusted: true},
		"signed, then its result edited by someone naming the merger's field manager": {report: final(fail, 10, func(u *unstructured.Unstructured) {
			signed(u)
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"policy": "p", "rule": "r", "result": "pass",
				"timestamp": map[string]any{"seconds": int64(10), "nanos": int64(0)}, "properties": map[string]any{report.PropertyProcess: report.ProcessAdmission}}}, "results")
			u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 20)})
		}), key: key},
		"unsigned, last written under the merger's field manager": {report: final(pass, 10, func(u *unstructured.Unstructured) {
			u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 10)})
		}), key: key},
		"unsigned, at the first start with a key (a version that did not sign wrote it)": {report: final(pass, 10, func(u *unstructured.Unstructured) {
			u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 10)})
		}), key: key, legacy: true, trusted: true},
		"signed with another key": {report: final(fail, 10, func(u *unstructured.Unstructured) {
			signed(u)
		}), key: []byte("another key")},
		"written by the merger (no key)": {report: final(fail, 10, func(u *unstructured.Unstructured) {
			u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 10)})
		}), trusted: true},
		"edited after": {report: final(pass, 10, func(u *unstructured.Unstructured) {
			u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(fieldManager, 10), entry("kubectl-edit", 20)})
		})},
		"its scope names a resource of another namespace": {report: final(pass, 10, func(u *unstructured.Unstructured) {
			signed(u)
			_ = unstructured.SetNestedField(u.Object, "team-b", "scope", "namespace")
		}), key: key},
		"its scope names another resource": {report: final(pass, 10, func(u *unstructured.Unstructured) {
			signed(u)
			_ = unstructured.SetNestedField(u.Object, "u9", "scope", "uid")
		}), key: key},
	} {
		t.Run(name, func(t *testing.T) {
			m := New(fakeClient(tc.report), Options{Registry: prometheus.NewRegistry(), Key: tc.key, LegacySeeds: tc.legacy})
			if err := m.seed(ctx); err != nil {
				t.Fatal(err)
			}
			_, seeded := m.st.seeds["u1"]
			if seeded != tc.trusted {
				t.Errorf("read back = %v, want %v", seeded, tc.trusted)
			}
			if w := m.st.written["u1"]; !tc.trusted && w.Digest != 0 {
				t.Error("an untrusted report's content counts as what the merger wrote")
			}
		})
	}
	t.Run("a time in the future is clamped", func(t *testing.T) {
		now := time.Unix(1000, 0)
		m := New(fakeClient(final(fail, 4_102_444_800 /* 2100 */, func(*unstructured.Unstructured) {})),
			Options{Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }})
		if err := m.seed(ctx); err != nil {
			t.Fatal(err)
		}
		if got := m.st.seeds["u1"].results[0].seconds; got != now.Unix() {
			t.Errorf("read back at %d, want clamped to %d", got, now.Unix())
		}
	})
}

// editFinal changes the result of the final report of u1 in the API server
// and returns it.
func editFinal(t *testing.T, m *Merger, result wgv1alpha2.Result) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	u, err := m.st.client.Resource(apiresources.PolicyReport).Namespace("ns").Get(ctx, "u1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	results, _, _ := unstructured.NestedSlice(u.Object, "results")
	results[0].(map[string]any)["result"] = string(result)
	_ = unstructured.SetNestedSlice(u.Object, results, "results") // a slice of JSON values always sets
	out, err := m.st.client.Resource(apiresources.PolicyReport).Namespace("ns").Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFinalReportsListedConcurrently: the namespaced and cluster-scoped
// reflectors list at once (reports-server answers both in the same
// instant): their Replace calls must not race (go test -race; the merger
// died of "concurrent map writes" on kind with reports-server).
func TestFinalReportsListedConcurrently(t *testing.T) {
	ctx := context.Background()
	m := New(fakeClient(), Options{Registry: prometheus.NewRegistry()})
	owned := &finalReports{m: m.st, listed: map[schema.GroupVersionResource]bool{}}
	var wg sync.WaitGroup
	for _, gvr := range []schema.GroupVersionResource{apiresources.PolicyReport, apiresources.ClusterPolicyReport} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				owned.Replace(ctx, gvr, nil)
			}
		}()
	}
	wg.Wait()
	if !owned.listed[apiresources.PolicyReport] || !owned.listed[apiresources.ClusterPolicyReport] {
		t.Fatalf("listed %v: both kinds were listed", owned.listed)
	}
}
