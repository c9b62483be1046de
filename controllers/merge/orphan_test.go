package merge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/report"
)

// report makes an intermediate report of a Pod, without ownerReference
// unless owned.
func podReport(t *testing.T, uid types.UID, pod string, owned bool) *unstructured.Unstructured {
	t.Helper()
	r := &kyvernov2.BackgroundScanReport{
		TypeMeta: metav1.TypeMeta{APIVersion: kyvernov2.GroupVersion.String(), Kind: "BackgroundScanReport"},
		ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "ns", UID: types.UID("report-" + uid), ResourceVersion: "1",
			Labels: map[string]string{report.LabelResourceUID: string(uid), report.LabelResourceGVR: "v1.pods"}},
		Spec: kyvernov2.ReportSpec{Owner: metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod, UID: uid}},
	}
	if owned {
		r.OwnerReferences = []metav1.OwnerReference{r.Spec.Owner}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestOrphanCheck(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := api.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	live := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: "ns", UID: "live-uid"}}
	recreated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "recreated", Namespace: "ns", UID: "new-uid"}}
	reports := map[string]*unstructured.Unstructured{
		"live-uid":  podReport(t, "live-uid", "live", false),
		"gone-uid":  podReport(t, "gone-uid", "gone", false),
		"old-uid":   podReport(t, "old-uid", "recreated", false),
		"owned-uid": podReport(t, "owned-uid", "owned", true),
	}
	objs := []runtime.Object{live, recreated}
	for _, r := range reports {
		objs = append(objs, r.DeepCopy())
	}
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		apiresources.BackgroundScanReport: "BackgroundScanReportList",
	}, objs...)
	now := time.Unix(1000, 0)
	m := New(client, Options{Registry: prometheus.NewRegistry(), OrphanGrace: time.Minute, Now: func() time.Time { return now }})
	for _, r := range reports {
		m.in.Upsert(context.Background(), apiresources.BackgroundScanReport, r)
	}

	if c := m.orph.orphanCandidates(now.Add(30 * time.Second)); len(c) != 0 {
		t.Fatalf("reports within the grace period are candidates: %v", c)
	}
	now = now.Add(2 * time.Minute)
	cands := m.orph.orphanCandidates(now)
	got := map[string]bool{}
	for _, c := range cands {
		got[c.uid] = true
	}
	if len(got) != 3 || !got["live-uid"] || !got["gone-uid"] || !got["old-uid"] {
		t.Fatalf("candidates %v, want the three unowned reports (the owned one is the garbage collector's)", got)
	}
	ctx := context.Background()
	for _, c := range cands {
		if err := m.orph.checkOrphan(ctx, c); err != nil {
			t.Fatalf("check %s: %v", c.uid, err)
		}
	}
	ri := client.Resource(apiresources.BackgroundScanReport).Namespace("ns")
	for uid, wantKept := range map[string]bool{"live-uid": true, "gone-uid": false, "old-uid": false, "owned-uid": true} {
		_, err := ri.Get(ctx, uid, metav1.GetOptions{})
		if kept := err == nil; kept != wantKept {
			t.Errorf("report %s kept = %v, want %v (err %v)", uid, kept, wantKept, err)
		}
	}
	if c := m.orph.orphanCandidates(now.Add(time.Minute)); len(c) != 2 {
		// the live one was just found alive; the two deleted ones remain in
		// the state until their watch events arrive
		t.Errorf("after the check, %d candidates, want 2", len(c))
	}
}

func TestOrphanCheckWithoutAnyWayToFindTheKind(t *testing.T) {
	m := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{Registry: prometheus.NewRegistry()})
	if _, err := m.cl.resourceGone(context.Background(), "u", ownerRef{apiVersion: "example.com/v1", kind: "Widget", namespace: "ns", name: "w"}); err == nil {
		t.Error("a report without resource.gvr label and no RESTMapper was judged")
	}
}
