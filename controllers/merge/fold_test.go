package merge

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// kyvernoEphemeral is an EphemeralReport as Kyverno 1.19's admission
// controller writes one for a request on the ConfigMap ns/app (u1): a
// random name, an empty owner, the resource named by labels and
// annotations (../shared/kyverno-1.19/ephemeralreport-admission.yaml).
func kyvernoEphemeral(name, hash, rule string, result wgv1alpha2.Result, sec int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "reports.kyverno.io/v1", "kind": "EphemeralReport",
		"metadata": map[string]any{
			"name": name, "namespace": "ns", "uid": "eph-" + name, "resourceVersion": "7",
			"labels": map[string]any{
				report.LabelManagedBy: "kyverno", report.LabelSource: "admission", report.LabelResourceUID: "u1",
				report.LabelResourceGVR: "configmaps.v1", report.LabelResourceKind: "ConfigMap", report.LabelResourceVersion: "v1",
				report.LabelResourceGroup: "", report.LabelResourceHash: hash,
			},
			"annotations": map[string]any{report.AnnotationResourceName: "app", report.AnnotationResourceNamespace: "ns"},
		},
		"spec": map[string]any{
			"owner": map[string]any{"apiVersion": "", "kind": "", "name": "", "uid": ""},
			"results": []any{map[string]any{"policy": "p", "rule": rule, "result": string(result), "source": "kyverno",
				"properties": map[string]any{"process": "admission review"}, "timestamp": map[string]any{"seconds": sec, "nanos": int64(0)}}},
		},
	}}
}

func ephemeralLeft(t *testing.T, m *Merger) int {
	t.Helper()
	list, err := m.st.client.Resource(apiresources.EphemeralReport).Namespace("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// R20 beside Kyverno: the merger reads Kyverno's EphemeralReports itself,
// folds those of one resource (newest result per rule), writes the final
// report, and deletes them; their results stay through later merges until a
// later request's report stands for them. A report naming no resource
// is deleted unmerged. A restarted merger writes nothing.
func TestKyvernoEphemeralReportsAreFoldedMergedAndDeleted(t *testing.T) {
	stored := podObject("a")
	current := hashOf(t, stored)
	e1 := kyvernoEphemeral("e1", current, "r", wgv1alpha2.ResultFail, 10)
	e2 := kyvernoEphemeral("e2", current, "r2", wgv1alpha2.ResultPass, 20)
	nameless := kyvernoEphemeral("e0", current, "r", wgv1alpha2.ResultPass, 5)
	delete(nameless.Object["metadata"].(map[string]any)["annotations"].(map[string]any), report.AnnotationResourceName)
	client := fakeClient(stored.DeepCopy(), e1.DeepCopy(), e2.DeepCopy(), nameless.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	// Admission only (background off): no scan recomputes them, so they must
	// stay once their reports are gone.
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r", "r2")}
	ctx := context.Background()
	m.in.Replace(ctx, apiresources.EphemeralReport, []*unstructured.Unstructured{e1, e2, nameless})
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	const want = "p/r=fail admission review;p/r2=pass admission review;"
	if got := finalResults(t, m); got != want {
		t.Fatalf("final %q, want %q", got, want)
	}
	if n := ephemeralLeft(t, m); n != 0 {
		t.Errorf("%d EphemeralReports left after the merge, want 0 (the one naming no resource included)", n)
	}
	if got := testutil.ToFloat64(m.st.metrics.merged.WithLabelValues("ephemeralreports")); got != 2 {
		t.Errorf("merged{ephemeralreports} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.st.metrics.unusable); got != 1 {
		t.Errorf("unusable = %v, want 1", got)
	}
	// The watch tells the deletes: the results stay, nothing is written.
	m.in.Remove(ctx, apiresources.EphemeralReport, e1)
	m.in.Remove(ctx, apiresources.EphemeralReport, e2)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != want {
		t.Fatalf("after the deletes: final %q, want %q", got, want)
	}
	// A later request's report: a request evaluates every rule that still
	// matches, so it stands for the content's admission results (r2 no
	// longer matches), as a new AdmissionReport of tally's would.
	e3 := kyvernoEphemeral("e3", current, "r", wgv1alpha2.ResultPass, 30)
	if _, err := client.Resource(apiresources.EphemeralReport).Namespace("ns").Create(ctx, e3, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.in.Upsert(ctx, apiresources.EphemeralReport, e3)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	const want3 = "p/r=pass admission review;"
	if got := finalResults(t, m); got != want3 {
		t.Fatalf("after a later request: final %q, want %q", got, want3)
	}
	if n := ephemeralLeft(t, m); n != 0 {
		t.Errorf("%d EphemeralReports left, want 0", n)
	}
	writes := testutil.ToFloat64(m.st.metrics.writes.WithLabelValues("create")) + testutil.ToFloat64(m.st.metrics.writes.WithLabelValues("update"))
	if writes != 2 {
		t.Errorf("%v final report writes, want 2", writes)
	}

	checkRestartWritesNothing(t, client, Options{Registry: prometheus.NewRegistry(), Ingest: true}, m.st.policies, want3)
}

// An EphemeralReport deleted by someone else before it was merged takes
// its results with it, as an AdmissionReport's deletion does.
func TestFoldedReportsDeletedBeforeTheirMerge(t *testing.T) {
	stored := podObject("a")
	current := hashOf(t, stored)
	e1 := kyvernoEphemeral("e1", current, "r", wgv1alpha2.ResultFail, 10)
	client := fakeClient(stored.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
	ctx := context.Background()
	m.in.Upsert(ctx, apiresources.EphemeralReport, e1)
	m.in.Remove(ctx, apiresources.EphemeralReport, e1)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != "" {
		t.Fatalf("final %q, want none", got)
	}
}

// With ingestion on, every admission report of a resource is folded into
// one part, whoever wrote it: tally's own AdmissionReport, a Kyverno
// 1.10-1.12 kyverno.io AdmissionReport, a Kyverno 1.13+ EphemeralReport;
// the newest result per rule counts, and all of them go once merged. A
// background scan's EphemeralReport is not admission output: left alone.
func TestEveryAdmissionReportOfAResourceIsFolded(t *testing.T) {
	stored := podObject("a")
	current := hashOf(t, stored)
	ours := storedAdmission(intermediate("AdmissionReport", current, wgv1alpha2.ResultFail, 10), "1", "5")
	legacy := storedAdmission(intermediate("AdmissionReport", current, wgv1alpha2.ResultFail, 20), "2", "6")
	legacy.SetName("kyverno-abc")
	eph := kyvernoEphemeral("e1", current, "r", wgv1alpha2.ResultPass, 30)
	bg := kyvernoEphemeral("bg", current, "r", wgv1alpha2.ResultFail, 40)
	labels := bg.GetLabels()
	labels[report.LabelSource] = "background-scan"
	bg.SetLabels(labels)
	client := fakeClient(stored.DeepCopy(), ours.DeepCopy(), legacy.DeepCopy(), eph.DeepCopy(), bg.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	m.st.policies = map[string]PolicyInfo{"p": pol(false, true, "r")}
	ctx := context.Background()
	m.in.Replace(ctx, apiresources.AdmissionReport, []*unstructured.Unstructured{ours, legacy})
	m.in.Replace(ctx, apiresources.EphemeralReport, []*unstructured.Unstructured{eph, bg})
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got, want := finalResults(t, m), "p/r=pass admission review;"; got != want {
		t.Fatalf("final %q, want %q (the EphemeralReport's is the newest)", got, want)
	}
	list, err := client.Resource(apiresources.AdmissionReport).Namespace("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d AdmissionReports left after the merge, want 0", len(list.Items))
	}
	left, err := client.Resource(apiresources.EphemeralReport).Namespace("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 1 || left.Items[0].GetName() != "bg" {
		t.Errorf("EphemeralReports left: %d, want only the background scan's", len(left.Items))
	}
}

// R45: Kyverno's mutating webhook sees a CREATE before the object has a
// UID: its report names the resource by type, namespace and name alone.
// The merger reads the resource's UID and merges the report under it; one
// whose resource is still not there two minutes after its creation is
// deleted unmerged, as Kyverno's reports controller deletes it.
func TestReportsOfCreatesWithoutAUIDAreAdopted(t *testing.T) {
	stored := podObject("a")
	mutate := kyvernoEphemeral("m1", "", "add-label", wgv1alpha2.ResultPass, 10)
	unstructured.RemoveNestedField(mutate.Object, "metadata", "labels", report.LabelResourceUID)
	unstructured.RemoveNestedField(mutate.Object, "metadata", "labels", report.LabelResourceHash)
	ghost := mutate.DeepCopy()
	ghost.SetName("m2")
	ghost.SetUID("eph-m2")
	ghost.SetAnnotations(map[string]string{report.AnnotationResourceName: "never-created", report.AnnotationResourceNamespace: "ns"})
	ghost.SetCreationTimestamp(metav1.NewTime(time.Now().Add(-3 * time.Minute)))
	client := fakeClient(stored.DeepCopy(), mutate.DeepCopy(), ghost.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	p := pol(true, true, "r")
	p.KyvernoOnly = map[string]bool{"add-label": true}
	m.st.policies = map[string]PolicyInfo{"p": p}
	ctx := context.Background()
	m.in.Upsert(ctx, apiresources.EphemeralReport, mutate)
	m.in.Upsert(ctx, apiresources.EphemeralReport, ghost)
	for _, key := range []string{adoptPrefix + "ephemeralreports/ns/m1", adoptPrefix + "ephemeralreports/ns/m2", "u1"} {
		if err := m.reconcile(ctx, key); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	if got, want := finalResults(t, m), "p/add-label=pass admission review;"; got != want {
		t.Fatalf("final %q, want %q", got, want)
	}
	if n := ephemeralLeft(t, m); n != 0 {
		t.Errorf("%d EphemeralReports left, want 0 (the adopted one merged, the other given up)", n)
	}
	if got := testutil.ToFloat64(m.st.metrics.unusable); got != 1 {
		t.Errorf("unusable = %v, want 1 (the report of a resource never created)", got)
	}
	if len(m.st.unadopted) != 0 {
		t.Errorf("reports still waiting for adoption: %v", m.st.unadopted)
	}
}

// R45: Kyverno's background controller writes its generate and
// mutateExisting results on the trigger's report, with source
// background-scan: the merger folds those results (and only those: a
// background scan of Kyverno's reports controller is not admission output).
func TestBackgroundControllerResultsAreFolded(t *testing.T) {
	stored := podObject("a")
	gen := kyvernoEphemeral("g1", "", "clone", wgv1alpha2.ResultPass, 10)
	gen.Object["metadata"].(map[string]any)["labels"].(map[string]any)[report.LabelSource] = sourceBackgroundScan
	results := gen.Object["spec"].(map[string]any)["results"].([]any)
	results[0].(map[string]any)["properties"] = map[string]any{"process": "background scan", propertyGeneratedResources: "/v1, Kind=Secret Name=regcred Namespace=ns"}
	// A result of a background scan beside it is not the controller's.
	results = append(results, map[string]any{"policy": "p", "rule": "r", "result": "fail", "source": "kyverno",
		"properties": map[string]any{"process": "background scan"}, "timestamp": map[string]any{"seconds": int64(10), "nanos": int64(0)}})
	gen.Object["spec"].(map[string]any)["results"] = results
	scanOnly := kyvernoEphemeral("s1", "", "r", wgv1alpha2.ResultFail, 10)
	scanOnly.Object["metadata"].(map[string]any)["labels"].(map[string]any)[report.LabelSource] = sourceBackgroundScan
	client := fakeClient(stored.DeepCopy(), gen.DeepCopy(), scanOnly.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	p := pol(true, true, "r")
	p.KyvernoOnly = map[string]bool{"clone": true}
	m.st.policies = map[string]PolicyInfo{"p": p}
	ctx := context.Background()
	m.in.Upsert(ctx, apiresources.EphemeralReport, gen)
	m.in.Upsert(ctx, apiresources.EphemeralReport, scanOnly)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got, want := finalResults(t, m), "p/clone=pass background scan;"; got != want {
		t.Fatalf("final %q, want %q", got, want)
	}
	if n := ephemeralLeft(t, m); n != 1 {
		t.Errorf("%d EphemeralReports left, want 1 (the background scan's, not the merger's to delete)", n)
	}
}

// R45: beside Kyverno, the results of policy kinds only Kyverno evaluates
// (a MutatingPolicy here) stay while the policy does, and go with it.
func TestResultsOfKindsOnlyKyvernoEvaluatesStayWithTheirPolicy(t *testing.T) {
	stored := podObject("a")
	e := kyvernoEphemeral("e1", "", "", wgv1alpha2.ResultPass, 10)
	results := e.Object["spec"].(map[string]any)["results"].([]any)
	results[0].(map[string]any)["source"] = "KyvernoMutatingPolicy"
	results[0].(map[string]any)["policy"] = "add-labels"
	client := fakeClient(stored.DeepCopy(), e.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	m.st.policies = map[string]PolicyInfo{}
	m.st.policyKinds = map[string]schema.GroupVersionResource{}
	ctx := context.Background()
	mpolGVR := schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "mutatingpolicies"}
	mpol := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": map[string]any{"name": "add-labels"}}}
	m.in.Upsert(ctx, mpolGVR, mpol)
	m.in.Upsert(ctx, apiresources.EphemeralReport, e)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got, want := finalResults(t, m), "add-labels/=pass admission review;"; got != want {
		t.Fatalf("final %q, want %q", got, want)
	}
	m.in.Remove(ctx, mpolGVR, mpol)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := finalResults(t, m); got != "" {
		t.Fatalf("after the policy's deletion: final %q, want none", got)
	}
}

// R45: Kyverno writes one report per handler: its validate handler's, its
// mutating webhook's, its background controller's, each merged and
// deleted before the next comes. A newer one stands for the validate
// rules of a policy it names, and for the other rules it names, never for
// a rule another handler writes.
func TestOneHandlersReportLeavesAnotherHandlersRules(t *testing.T) {
	stored := podObject("a")
	validate := kyvernoEphemeral("v", "", "r", wgv1alpha2.ResultFail, 10)
	mutate := kyvernoEphemeral("m", "", "add-label", wgv1alpha2.ResultPass, 11)
	generate := kyvernoEphemeral("g", "", "clone", wgv1alpha2.ResultPass, 12)
	client := fakeClient(stored.DeepCopy(), validate.DeepCopy(), mutate.DeepCopy(), generate.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	p := pol(false, true, "r")
	p.KyvernoOnly = map[string]bool{"add-label": true, "clone": true}
	m.st.policies = map[string]PolicyInfo{"p": p}
	ctx := context.Background()
	for _, e := range []*unstructured.Unstructured{validate, mutate, generate} {
		m.in.Upsert(ctx, apiresources.EphemeralReport, e)
		if err := m.reconcile(ctx, "u1"); err != nil {
			t.Fatal(err)
		}
		m.in.Remove(ctx, apiresources.EphemeralReport, e) // merged and deleted
		if err := m.reconcile(ctx, "u1"); err != nil {
			t.Fatal(err)
		}
	}
	const want = "p/add-label=pass admission review;p/clone=pass admission review;p/r=fail admission review;"
	if got := finalResults(t, m); got != want {
		t.Fatalf("final %q, want %q", got, want)
	}
	// A later request's validate report stands for the validate rules
	// alone.
	later := kyvernoEphemeral("v2", "", "r", wgv1alpha2.ResultPass, 20)
	if _, err := client.Resource(apiresources.EphemeralReport).Namespace("ns").Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.in.Upsert(ctx, apiresources.EphemeralReport, later)
	if err := m.reconcile(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	const want2 = "p/add-label=pass admission review;p/clone=pass admission review;p/r=pass admission review;"
	if got := finalResults(t, m); got != want2 {
		t.Fatalf("after a later request: final %q, want %q", got, want2)
	}
}

// R45: reports of one request from different handlers of Kyverno, bound
// to the same content, each merged and deleted before the next arrives
// (Kyverno's mutating webhook's report of a CREATE is adopted late): a
// later one stands for the rules it names, never for another handler's
// results of the same content (seen in the R45 case: a GeneratingPolicy's
// report took the mutate rule's result with it).
func TestSameContentReportsOfOtherHandlersStay(t *testing.T) {
	stored := podObject("a")
	current := hashOf(t, stored)
	validate := kyvernoEphemeral("v", current, "r", wgv1alpha2.ResultFail, 10)
	mutate := kyvernoEphemeral("m", current, "add-label", wgv1alpha2.ResultPass, 11)
	generate := kyvernoEphemeral("g", "", "clone", wgv1alpha2.ResultPass, 12)
	client := fakeClient(stored.DeepCopy(), validate.DeepCopy(), mutate.DeepCopy(), generate.DeepCopy())
	m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
	p := pol(false, true, "r")
	p.KyvernoOnly = map[string]bool{"add-label": true, "clone": true}
	m.st.policies = map[string]PolicyInfo{"p": p}
	ctx := context.Background()
	for _, order := range [][]*unstructured.Unstructured{{validate, mutate, generate}, {mutate, validate, generate}} {
		m.st.states, m.st.folds = map[string]*resourceState{}, map[string]*fold{}
		for _, e := range order {
			m.in.Upsert(ctx, apiresources.EphemeralReport, e)
			if err := m.reconcile(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
			m.in.Remove(ctx, apiresources.EphemeralReport, e) // merged and deleted
			if err := m.reconcile(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
		}
		const want = "p/add-label=pass admission review;p/clone=pass admission review;p/r=fail admission review;"
		if got := finalResults(t, m); got != want {
			t.Errorf("%s first: final %q, want %q", order[0].GetName(), got, want)
		}
	}
}

// The same, in every order and every way the reports may be folded
// together before a merge.
func TestOtherHandlersResultsStayInAnyOrder(t *testing.T) {
	stored := podObject("a")
	current := hashOf(t, stored)
	reports := []*unstructured.Unstructured{
		kyvernoEphemeral("v", current, "r", wgv1alpha2.ResultFail, 10),
		kyvernoEphemeral("m", current, "add-label", wgv1alpha2.ResultPass, 11),
		kyvernoEphemeral("g", "", "clone", wgv1alpha2.ResultPass, 12),
		kyvernoEphemeral("x", "", "target", wgv1alpha2.ResultPass, 13),
	}
	const want = "p/add-label=pass admission review;p/clone=pass admission review;p/r=fail admission review;p/target=pass admission review;"
	var permute func(prefix, rest []int)
	ctx := context.Background()
	permute = func(prefix, rest []int) {
		if len(rest) > 0 {
			for i := range rest {
				next := append(append([]int{}, rest[:i]...), rest[i+1:]...)
				permute(append(append([]int{}, prefix...), rest[i]), next)
			}
			return
		}
		for pattern := range 1 << (len(prefix) - 1) { // bit i: merge after the i-th report
			client := fakeClient(stored.DeepCopy(), reports[0].DeepCopy(), reports[1].DeepCopy(), reports[2].DeepCopy(), reports[3].DeepCopy())
			m := New(client, Options{Registry: prometheus.NewRegistry(), Ingest: true})
			p := pol(false, true, "r")
			p.KyvernoOnly = map[string]bool{"add-label": true, "clone": true, "target": true}
			m.st.policies = map[string]PolicyInfo{"p": p}
			var pending []*unstructured.Unstructured
			for i, ri := range prefix {
				m.in.Upsert(ctx, apiresources.EphemeralReport, reports[ri])
				pending = append(pending, reports[ri])
				if i < len(prefix)-1 && pattern&(1<<i) == 0 {
					continue
				}
				if err := m.reconcile(ctx, "u1"); err != nil {
					t.Fatal(err)
				}
				for _, e := range pending {
					m.in.Remove(ctx, apiresources.EphemeralReport, e) // merged and deleted
				}
				pending = nil
				if err := m.reconcile(ctx, "u1"); err != nil {
					t.Fatal(err)
				}
			}
			if got := finalResults(t, m); got != want {
				t.Errorf("order %v, merges %04b: final %q, want %q", prefix, pattern, got, want)
			}
		}
	}
	permute(nil, []int{0, 1, 2, 3})
}
