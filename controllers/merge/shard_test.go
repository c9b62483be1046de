package merge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// A merger of a shard reads back, merges, writes and deletes only its
// shard's reports: the final report of another shard's namespace is never
// deleted, though no intermediate report of its resource reaches this
// merger (its own merger keeps it).
func TestAShardsMergerLeavesOtherShardsReportsAlone(t *testing.T) {
	finalIn := func(namespace string) *unstructured.Unstructured {
		s := report.Subject{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: "p", UID: types.UID(namespace + "-uid")}
		polr, _ := report.Final(s, []wgv1alpha2.PolicyReportResult{res("p", "r", fail, 10)})
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(polr)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: obj}
	}
	client := fakeClient(finalIn("mine"), finalIn("theirs"))
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	reg := prometheus.NewRegistry()
	m := New(client, Options{Registry: reg, Shard: func(ns string) bool { return ns == "mine" }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return testutilCounter(t, reg, metricWrites, "delete") >= 1, nil
	}); err != nil {
		t.Fatal("the stale final report of the shard was not deleted")
	}
	// Once every kind is listed and no work is left, a wrong delete of the
	// other shard's report would have been made.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return m.Synced(), nil
	}); err != nil {
		t.Fatal("the merger did not settle")
	}
	if _, err := client.Resource(apiresources.PolicyReport).Namespace("theirs").Get(ctx, "theirs-uid", metav1.GetOptions{}); err != nil {
		t.Errorf("another shard's final report was deleted: %v", err)
	}
	if n := testutilCounter(t, reg, metricWrites, "delete"); n != 1 {
		t.Errorf("%v deletes, want 1 (the shard's own)", n)
	}
	m.in.Upsert(ctx, apiresources.AdmissionReport, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kyverno.io/v2", "kind": "AdmissionReport",
		"metadata": map[string]any{"name": "x", "namespace": "theirs", "labels": map[string]any{report.LabelResourceUID: "u9"}},
		"spec":     map[string]any{"owner": map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "q", "uid": "u9"}, "results": []any{}},
	}})
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if m.st.states["u9"] != nil {
		t.Errorf("an AdmissionReport of another shard was taken in")
	}
}
