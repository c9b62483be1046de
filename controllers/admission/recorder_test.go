package admission

import (
	"context"
	"errors"
	"fmt"
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
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

func result(policy, rule string, res wgv1alpha2.Result, sec int64) wgv1alpha2.PolicyReportResult {
	return wgv1alpha2.PolicyReportResult{Policy: policy, Rule: rule, Result: res, Timestamp: metav1.Timestamp{Seconds: sec},
		Properties: map[string]string{"process": "admission review"}}
}

func podEntry(at int64, hash string, results ...wgv1alpha2.PolicyReportResult) *entry {
	return &entry{uid: "uid-1", namespace: "prod", gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, hash: hash, at: time.Unix(at, 0),
		owner:        metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-1"},
		policyLabels: map[string]string{"cpol.kyverno.io/a": "1"}, results: results}
}

func fakeRecorder(objs ...runtime.Object) (*Recorder, *dynamicfake.FakeDynamicClient) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.AdmissionReport: "AdmissionReportList", apiresources.ClusterAdmissionReport: "ClusterAdmissionReportList",
		apiresources.EphemeralReport: "EphemeralReportList",
	}, objs...)
	return NewRecorder(client, RecorderOptions{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), FlushInterval: time.Second, Workers: 2,
		Registry: prometheus.NewRegistry()}), client
}

func readReport(t *testing.T, client *dynamicfake.FakeDynamicClient, ns, name string) (*kyvernov2.AdmissionReport, *unstructured.Unstructured) {
	t.Helper()
	u, err := client.Resource(apiresources.AdmissionReport).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := stored(u) // spec.results and the packed entries
	if r.Name == "" {
		t.Fatalf("report %s/%s unreadable", ns, name)
	}
	return &r, u
}

func TestFoldAdmissionNewestWins(t *testing.T) {
	got := report.FoldAdmission(
		[]wgv1alpha2.PolicyReportResult{result("a", "r1", "fail", 10), result("a", "r2", "pass", 30)},
		[]wgv1alpha2.PolicyReportResult{result("a", "r1", "pass", 20), result("a", "r2", "fail", 25), result("b", "r", "pass", 5)},
	)
	want := map[string]wgv1alpha2.Result{"a/r1": "pass", "a/r2": "pass", "b/r": "pass"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for _, r := range got {
		if want[r.Policy+"/"+r.Rule] != r.Result {
			t.Errorf("%s/%s = %s, want %s", r.Policy, r.Rule, r.Result, want[r.Policy+"/"+r.Rule])
		}
	}
}

func TestRecorderWritesOneReportPerResource(t *testing.T) {
	rec, client := fakeRecorder()
	ctx := context.Background()
	// Three requests for one resource (one content) before a flush: one pending entry.
	rec.add(podEntry(10, "h1", result("a", "r1", "fail", 10)))
	rec.add(podEntry(20, "h1", result("a", "r1", "pass", 20), result("a", "r2", "fail", 20)))
	rec.add(podEntry(15, "h1", result("a", "r2", "pass", 15)))
	if n := rec.pendingCount(); n != 1 {
		t.Fatalf("pending = %d, want 1", n)
	}
	rec.flush(ctx, false)
	r, u := readReport(t, client, "prod", "uid-1")
	if got := summary(r); got != "a/r1=pass@h1 a/r2=fail@h1" {
		t.Errorf("results = %s", got)
	}
	if _, inSpec, _ := unstructured.NestedSlice(u.Object, "spec", "results"); inSpec || u.GetAnnotations()[report.AnnotationResults] == "" {
		t.Errorf("entries not packed in %s: %v", report.AnnotationResults, u.Object)
	}
	labels := u.GetLabels()
	if labels[report.LabelResourceHash] != "h1" || labels[report.LabelResourceUID] != "uid-1" || labels[report.LabelResourceGVR] != "pods.v1" ||
		labels["app.kubernetes.io/managed-by"] != "tally" || labels["cpol.kyverno.io/a"] != "1" {
		t.Errorf("labels = %v", labels)
	}
	if r.Spec.Owner.UID != "uid-1" || len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != "uid-1" {
		t.Errorf("owner = %+v, ownerReferences = %+v", r.Spec.Owner, r.OwnerReferences)
	}
	if r.Spec.Summary.Pass != 1 || r.Spec.Summary.Fail != 1 {
		t.Errorf("summary = %+v", r.Spec.Summary)
	}

	// A later batch (another replica, or a later flush) merges into the same object.
	rec.add(podEntry(30, "h1", result("a", "r2", "pass", 30)))
	rec.add(podEntry(5, "h1", result("a", "r1", "fail", 5))) // older than what is stored: loses
	rec.flush(ctx, false)
	r, _ = readReport(t, client, "prod", "uid-1")
	if got := summary(r); got != "a/r1=pass@h1 a/r2=pass@h1" {
		t.Errorf("results after second flush = %s", got)
	}
	list, err := client.Resource(apiresources.AdmissionReport).Namespace("prod").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d reports, want 1", len(list.Items))
	}
	writes := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			writes++
		}
	}
	if writes != 2 {
		t.Errorf("%d writes for two flushes, want 2", writes)
	}
}

// The results of another content (a forged review, a request never
// persisted) form a section of their own in the one report: they never
// replace the results of the content the resource has.
func TestRecorderKeepsASectionPerContent(t *testing.T) {
	rec, client := fakeRecorder()
	ctx := context.Background()
	rec.add(podEntry(10, "genuine", result("a", "r1", "fail", 10)))
	rec.flush(ctx, false)
	rec.add(podEntry(20, "forged", result("a", "r1", "pass", 20), result("a", "r2", "pass", 20)))
	rec.flush(ctx, false)
	r, u := readReport(t, client, "prod", "uid-1")
	if got := summary(r); got != "a/r1=pass@forged a/r1=fail@genuine a/r2=pass@forged" {
		t.Errorf("results = %s", got)
	}
	if u.GetLabels()[report.LabelResourceHash] != "forged" {
		t.Errorf("hash label = %s, want the newest section's", u.GetLabels()[report.LabelResourceHash])
	}
}

// A section older than the grace period whose content the resource no
// longer has is dropped at the next write, read with one GET of the
// resource; the section of the current content never is, however old, and
// however many sections come after it.
func TestRecorderDropsSectionsOfContentTheResourceNoLongerHas(t *testing.T) {
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "prod", "uid": "uid-1"}}}
	h, err := report.ContentHash(pod.Object)
	if err != nil {
		t.Fatal(err)
	}
	current := fmt.Sprintf("%x", h)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.AdmissionReport: "AdmissionReportList", {Version: "v1", Resource: "pods"}: "PodList"}, pod)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rec := NewRecorder(client, RecorderOptions{Clock: clk, FlushInterval: time.Second, Registry: prometheus.NewRegistry()})
	ctx := context.Background()

	rec.add(podEntry(1000, current, result("a", "r1", "fail", 1000)))
	rec.add(podEntry(1000, "forged-0", result("a", "r1", "pass", 1000)))
	rec.flush(ctx, false)
	for i := 1; i <= 2*maxSections; i++ { // a flood of forgeries, one a second
		clk.Step(time.Second)
		rec.add(podEntry(clk.Now().Unix(), fmt.Sprintf("forged-%d", i), result("a", "r1", "pass", clk.Now().Unix())))
		rec.flush(ctx, false)
	}
	r, _ := readReport(t, client, "prod", "uid-1")
	sections := map[string]bool{}
	for _, res := range r.Spec.Results {
		sections[report.HashOf(&res, "")] = true
	}
	if !sections[current] {
		t.Errorf("the section of the current content was dropped: %s", summary(r))
	}
	if len(sections) > maxSections {
		t.Errorf("%d sections, want at most %d", len(sections), maxSections)
	}
	if got := testutil.ToFloat64(rec.metrics.pruned.WithLabelValues(prunedOverflow)); got == 0 {
		t.Error("no section dropped for overflow")
	}

	// Past the grace period, the next write drops every section but the current content's.
	clk.Step(sectionGrace)
	rec.add(podEntry(clk.Now().Unix(), current, result("a", "r2", "pass", clk.Now().Unix())))
	rec.flush(ctx, false)
	r, _ = readReport(t, client, "prod", "uid-1")
	if got := summary(r); got != "a/r1=fail@"+current+" a/r2=pass@"+current {
		t.Errorf("results after the grace period = %s", got)
	}
	if got := testutil.ToFloat64(rec.metrics.pruned.WithLabelValues(prunedContentGone)); got == 0 {
		t.Error("no section dropped as stale")
	}
}

// A young section is kept whatever the resource holds: its request may not
// be persisted yet (an UPDATE admitted, then stored).
func TestRecorderKeepsYoungSectionsOfOtherContent(t *testing.T) {
	rec, client := fakeRecorder()
	ctx := context.Background()
	rec.add(podEntry(0, "old", result("a", "r1", "fail", 0)))
	rec.add(podEntry(0, "new", result("a", "r1", "pass", 0)))
	rec.flush(ctx, false)
	r, _ := readReport(t, client, "prod", "uid-1")
	if got := summary(r); got != "a/r1=pass@new a/r1=fail@old" {
		t.Errorf("results = %s", got)
	}
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "pods" {
			t.Errorf("the resource was read (%s) though no section is past the grace period", a.GetVerb())
		}
	}
}

func TestRecorderWritesNothingWhenNothingIsNewer(t *testing.T) {
	rec, client := fakeRecorder()
	ctx := context.Background()
	rec.add(podEntry(10, "h1", result("a", "r1", "pass", 10)))
	rec.flush(ctx, false)
	client.ClearActions()
	rec.add(podEntry(10, "h1", result("a", "r1", "pass", 10)))
	rec.flush(ctx, false)
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("unexpected %s", a.GetVerb())
		}
	}
}

func summary(r *kyvernov2.AdmissionReport) string {
	s := ""
	for i, res := range r.Spec.Results {
		if i > 0 {
			s += " "
		}
		s += res.Policy + "/" + res.Rule + "=" + string(res.Result)
		if h := report.HashOf(&res, ""); h != "" {
			s += "@" + h
		}
	}
	return s
}

func TestRecorderDropsWritesTheAPIServerRefuses(t *testing.T) {
	tests := map[string]struct {
		err    error
		reason string
	}{
		"the namespace is gone": {apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "prod"), dropNamespaceGone},
		"the namespace is terminating": {&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}}}}, dropNamespaceGone},
		"the report kind is not served": {apierrors.NewNotFound(schema.GroupResource{Group: "kyverno.io", Resource: "admissionreports"}, ""), dropNotServed},
		"the report is invalid":         {apierrors.NewInvalid(schema.GroupKind{Group: "kyverno.io", Kind: "AdmissionReport"}, "uid-1", nil), dropInvalid},
		"the write is forbidden":        {apierrors.NewForbidden(schema.GroupResource{Resource: "admissionreports"}, "uid-1", errors.New("no")), dropForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec, client := fakeRecorder()
			creates := 0
			client.PrependReactor("create", "admissionreports", func(k8stesting.Action) (bool, runtime.Object, error) {
				creates++
				return true, nil, tc.err
			})
			rec.add(podEntry(10, "h1", result("a", "r1", "fail", 10)))
			for range 5 {
				rec.clock.(*clocktesting.FakeClock).Step(time.Hour)
				rec.flush(context.Background(), false)
			}
			if creates != 1 {
				t.Errorf("%d creates, want 1: a refused write is not retried", creates)
			}
			if n := rec.pendingCount(); n != 0 {
				t.Errorf("pending = %d, want 0", n)
			}
			if got := testutil.ToFloat64(rec.metrics.dropped.WithLabelValues(tc.reason)); got != 1 {
				t.Errorf("dropped{%s} = %v, want 1", tc.reason, got)
			}
		})
	}
}

func TestRecorderRetriesTransientFailuresWithBackoffAndABound(t *testing.T) {
	rec, client := fakeRecorder()
	clk := rec.clock.(*clocktesting.FakeClock)
	var at []time.Time
	client.PrependReactor("create", "admissionreports", func(k8stesting.Action) (bool, runtime.Object, error) {
		at = append(at, clk.Now())
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	rec.add(podEntry(10, "h1", result("a", "r1", "fail", 10)))
	// Flush every second for an hour of fake time.
	for range 3600 {
		rec.flush(context.Background(), false)
		clk.Step(time.Second)
	}
	if len(at) != rec.opts.MaxAttempts {
		t.Fatalf("%d attempts, want the bound %d", len(at), rec.opts.MaxAttempts)
	}
	for i := 2; i < len(at); i++ {
		gap, prev := at[i].Sub(at[i-1]), at[i-1].Sub(at[i-2])
		if gap < prev || gap > rec.opts.RetryCap+time.Second {
			t.Errorf("attempt %d came %s after the one before (previous gap %s): want growing gaps capped at %s", i+1, gap, prev, rec.opts.RetryCap)
		}
	}
	if got := testutil.ToFloat64(rec.metrics.dropped.WithLabelValues(dropAttempts)); got != 1 {
		t.Errorf("dropped{attempts} = %v, want 1", got)
	}
	if n := rec.pendingCount(); n != 0 {
		t.Errorf("pending = %d after the bound, want 0", n)
	}
}

func TestRecorderWritesOnceTheFailurePasses(t *testing.T) {
	rec, client := fakeRecorder()
	clk := rec.clock.(*clocktesting.FakeClock)
	fails := 3
	client.PrependReactor("create", "admissionreports", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, apierrors.NewTooManyRequests("slow down", 1)
		}
		return false, nil, nil
	})
	rec.add(podEntry(10, "h1", result("a", "r1", "fail", 10)))
	for range 120 {
		rec.flush(context.Background(), false)
		clk.Step(time.Second)
	}
	r, _ := readReport(t, client, "prod", "uid-1")
	if got := summary(r); got != "a/r1=fail@h1" {
		t.Errorf("results = %s", got)
	}
}

func TestRecorderSurvivesAPanickingWrite(t *testing.T) {
	rec, client := fakeRecorder()
	client.PrependReactor("create", "admissionreports", func(k8stesting.Action) (bool, runtime.Object, error) {
		panic("boom")
	})
	rec.add(podEntry(10, "h1", result("a", "r1", "fail", 10)))
	rec.flush(context.Background(), false) // must not panic
	if got := testutil.ToFloat64(rec.metrics.dropped.WithLabelValues(dropPanicked)); got != 1 {
		t.Errorf("dropped{panicked} = %v, want 1", got)
	}
	if n := rec.pendingCount(); n != 0 {
		t.Errorf("pending = %d: a batch that panicked is not retried", n)
	}
}

// The report of a resource just created is created without a GET first;
// when another replica wrote it already, the results are merged into it.
func TestRecorderCreatesTheReportOfANewResourceWithoutReadingFirst(t *testing.T) {
	verbs := func(client *dynamicfake.FakeDynamicClient) []string {
		var out []string
		for _, a := range client.Actions() {
			out = append(out, a.GetVerb())
		}
		return out
	}
	rec, client := fakeRecorder()
	e := podEntry(10, "h1", result("a", "r1", "fail", 10))
	e.fresh = true
	rec.add(e)
	rec.flush(context.Background(), false)
	if got := fmt.Sprint(verbs(client)); got != "[create]" {
		t.Errorf("requests %s, want [create]", got)
	}

	// Another replica's report exists: the create is refused, then merged.
	rec2, _ := fakeRecorder()
	rec2.client = client
	client.ClearActions()
	e = podEntry(20, "h1", result("a", "r2", "pass", 20))
	e.fresh = true
	rec2.add(e)
	rec2.flush(context.Background(), false)
	if got := fmt.Sprint(verbs(client)); got != "[create get update]" {
		t.Errorf("requests %s, want [create get update]", got)
	}
	r, _ := readReport(t, client, "prod", "uid-1")
	if got := summary(r); got != "a/r1=fail@h1 a/r2=pass@h1" {
		t.Errorf("results = %s", got)
	}
}
