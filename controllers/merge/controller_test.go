package merge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
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
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		GVRPolicyReport: "PolicyReportList", GVRClusterPolicyReport: "ClusterPolicyReportList",
		GVRClusterPolicy: "ClusterPolicyList", GVRPolicy: "PolicyList",
		GVRAdmissionReport: "AdmissionReportList", GVRClusterAdmissionReport: "ClusterAdmissionReportList",
		GVRBackgroundScanReport: "BackgroundScanReportList", GVRClusterBackgroundScanReport: "ClusterBackgroundScanReportList",
	}, &unstructured.Unstructured{Object: obj})
	// The fake client serves paged LISTs, not watch-list streams.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	reg := prometheus.NewRegistry()
	m := New(client, Options{Registry: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := client.Resource(GVRPolicyReport).Namespace("ns").Get(ctx, "gone-uid", metav1.GetOptions{})
		if err != nil && testutilCounter(t, reg, metricWrites, "delete") == 1 {
			break // deleted, and counted
		}
		if time.Now().After(deadline) {
			m.mu.Lock()
			t.Fatalf("the stale final report was not deleted (listed %v, written %v)", m.listed, m.written)
		}
		time.Sleep(20 * time.Millisecond)
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
