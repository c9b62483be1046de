package merge

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynfake "k8s.io/client-go/dynamic/fake"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// A final report whose resource has no intermediate report left when the
// merger starts (deleted while it was down) goes (R19); one that still has
// its intermediate report is not written again.
func TestStartUpRemovesStaleFinalReports(t *testing.T) {
	stale := report.Subject{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "gone", UID: "gone-uid"}
	polr, _ := report.Final(stale, []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)})
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(polr)
	if err != nil {
		t.Fatal(err)
	}
	client := fakeClient(&unstructured.Unstructured{Object: obj})
	// The fake client serves paged LISTs, not watch-list streams.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	reg := prometheus.NewRegistry()
	m := New(client, Options{Registry: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.Resource(apiresources.PolicyReport).Namespace("ns").Get(ctx, "gone-uid", metav1.GetOptions{})
		return err != nil && testutilCounter(t, reg, metricWrites, "delete") == 1, nil // deleted, and counted
	}); err != nil {
		m.st.mu.Lock()
		t.Fatalf("the stale final report was not deleted (listed %v, written %v)", m.st.listed, m.st.written)
	}
}

func testutilCounter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// An intermediate report whose owner is empty and whose labels do not name
// the resource (a Kyverno 1.19 EphemeralReport copied as is) is never merged:
// it would give a final report named "" or "-" that the API server refuses.
// One naming its resource by labels and annotations is merged under it.
func TestIntermediateReportsThatNameNoResourceAreIgnored(t *testing.T) {
	m := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{Registry: prometheus.NewRegistry()})
	mk := func(name string, labels map[string]any, annotations map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kyverno.io/v2", "kind": "AdmissionReport",
			"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "r-" + name, "labels": labels, "annotations": annotations},
			"spec": map[string]any{
				"owner":   map[string]any{"apiVersion": "", "kind": "", "name": "", "uid": ""},
				"results": []any{map[string]any{"policy": "p", "rule": "r", "result": "pass"}},
			},
		}}
	}
	m.in.Upsert(context.Background(), apiresources.AdmissionReport, mk("empty", map[string]any{}, nil))
	m.in.Upsert(context.Background(), apiresources.AdmissionReport, mk("uid-only", map[string]any{report.LabelResourceUID: "u1"}, nil))
	m.in.Upsert(context.Background(), apiresources.AdmissionReport, mk("other-namespace", map[string]any{report.LabelResourceUID: "u3", report.LabelResourceGVR: "pods.v1", report.LabelResourceKind: "Pod"},
		map[string]any{report.AnnotationResourceName: "p", report.AnnotationResourceNamespace: "elsewhere"}))
	m.in.Upsert(context.Background(), apiresources.AdmissionReport, mk("named", map[string]any{report.LabelResourceUID: "u2", report.LabelResourceGVR: "configmaps.v1", report.LabelResourceKind: "ConfigMap"},
		map[string]any{report.AnnotationResourceName: "cm", report.AnnotationResourceNamespace: "ns"}))
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if len(m.st.states) != 1 || m.st.states["u2"] == nil {
		t.Fatalf("states = %v, want only u2", m.st.states)
	}
	want := report.Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm", UID: "u2"}
	if got := m.st.states["u2"].subject; got != want {
		t.Errorf("subject = %+v, want %+v", got, want)
	}
	if got := testutil.ToFloat64(m.st.metrics.unusable); got != 3 {
		t.Errorf("unusable = %v, want 3", got)
	}
}

// The final reports carry the configured managed-by label (beside Kyverno:
// "kyverno", which Kyverno's tooling selects reports by); "tally" by default.
func TestFinalReportsCarryTheConfiguredManagedBy(t *testing.T) {
	s := report.Subject{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p", UID: "uid-1"}
	results := []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)}
	for _, managedBy := range []string{"tally", "kyverno"} {
		_, body, _, err := finalBody(report.APIWGPolicy, s, results, managedBy)
		if err != nil {
			t.Fatal(err)
		}
		var got applyReport
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if v := got.Metadata.Labels[report.LabelManagedBy]; v != managedBy {
			t.Errorf("managed-by = %q, want %q", v, managedBy)
		}
	}
	if got := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{}).st.opts.ManagedBy; got != report.ManagedBy {
		t.Errorf("default managed-by = %q, want %q", got, report.ManagedBy)
	}
}

// At start-up the merger takes as its own the final reports labelled with
// the configured managed-by value, and only those: beside Kyverno
// (--managed-by=kyverno) a stale one labelled kyverno goes, one labelled
// tally (not written by this configuration) is left alone.
func TestStartUpSelectsFinalReportsByTheConfiguredManagedBy(t *testing.T) {
	objs := []runtime.Object{}
	for _, managedBy := range []string{"kyverno", "tally"} {
		s := report.Subject{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: managedBy, UID: types.UID(managedBy + "-uid")}
		polr, _ := report.Final(s, []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)})
		polr.Labels[report.LabelManagedBy] = managedBy
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(polr)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
	client := fakeClient(objs...)
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	reg := prometheus.NewRegistry()
	m := New(client, Options{Registry: reg, ManagedBy: "kyverno"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.Resource(apiresources.PolicyReport).Namespace("ns").Get(ctx, "kyverno-uid", metav1.GetOptions{})
		return err != nil && testutilCounter(t, reg, metricWrites, "delete") == 1, nil
	}); err != nil {
		t.Fatal("the stale final report labelled kyverno was not deleted")
	}
	if _, err := client.Resource(apiresources.PolicyReport).Namespace("ns").Get(ctx, "tally-uid", metav1.GetOptions{}); err != nil {
		t.Errorf("the report labelled tally, not this merger's, was touched: %v", err)
	}
}

func TestFinalReportsInTheOpenReportsAPI(t *testing.T) {
	results := []wgv1alpha2.PolicyReportResult{{Policy: "p", Rule: "r", Result: "pass", Source: "kyverno"}}
	for _, tc := range []struct {
		namespace, kind string
	}{{"ns", "Report"}, {"", "ClusterReport"}} {
		s := report.Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: tc.namespace, Name: "cm", UID: "uid-1"}
		_, body, _, err := finalBody(report.APIOpenReports, s, results, "tally")
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got["apiVersion"] != "openreports.io/v1alpha1" || got["kind"] != tc.kind {
			t.Errorf("namespace %q: %v/%v, want openreports.io/v1alpha1 %s", tc.namespace, got["apiVersion"], got["kind"], tc.kind)
		}
		if res, _ := got["results"].([]any); len(res) != 1 {
			t.Errorf("results %v, want the one result", got["results"])
		}
	}
	if _, err := report.ParseAPI("policyreports"); err == nil {
		t.Error("an unknown report API was accepted")
	}
}

// fakeClient is a fake dynamic client serving the kinds the merger lists.
func fakeClient(objs ...runtime.Object) *dynfake.FakeDynamicClient {
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.PolicyReport: "PolicyReportList", apiresources.ClusterPolicyReport: "ClusterPolicyReportList",
		apiresources.ClusterPolicy: "ClusterPolicyList", apiresources.Policy: "PolicyList",
		apiresources.AdmissionReport: "AdmissionReportList", apiresources.ClusterAdmissionReport: "ClusterAdmissionReportList",
		apiresources.BackgroundScanReport: "BackgroundScanReportList", apiresources.ClusterBackgroundScanReport: "ClusterBackgroundScanReportList",
		apiresources.ValidatingPolicy: "ValidatingPolicyList", apiresources.NamespacedValidatingPolicy: "NamespacedValidatingPolicyList",
		apiresources.MutatingPolicy: "MutatingPolicyList", apiresources.NamespacedMutatingPolicy: "NamespacedMutatingPolicyList",
		apiresources.ImageValidatingPolicy: "ImageValidatingPolicyList", apiresources.NamespacedImageValidatingPolicy: "NamespacedImageValidatingPolicyList",
		apiresources.ValidatingAdmissionPolicy: "ValidatingAdmissionPolicyList", apiresources.MutatingAdmissionPolicy: "MutatingAdmissionPolicyList",
		apiresources.EphemeralReport: "EphemeralReportList", apiresources.ClusterEphemeralReport: "ClusterEphemeralReportList",
		apiresources.Namespace: "NamespaceList",
	}, watch.WithNamespaces(objs...)...)
}
