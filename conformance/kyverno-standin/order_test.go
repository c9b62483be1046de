package main

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// Issue 38: the stand-in writes a request's reports when Kyverno 1.19 does.
// The ValidatingPolicy handler's report exists when write returns (before
// the answer); the classic Enforce and Audit handlers' reports come later,
// each of its own, and write does not wait for them.
func TestReportsAreWrittenWhenKyvernoWritesThem(t *testing.T) {
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.EphemeralReport: "EphemeralReportList",
	})
	release := make(chan struct{})
	var mu sync.Mutex
	var created []*unstructured.Unstructured
	client.PrependReactor("create", "ephemeralreports", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		results, _, _ := unstructured.NestedSlice(u.Object, "spec", "results")
		if src, _, _ := unstructured.NestedString(results[0].(map[string]any), "source"); src == engine.SourceKyverno {
			<-release // the classic handlers' creates hang until released
		}
		mu.Lock()
		created = append(created, u)
		mu.Unlock()
		return true, u, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &standin{client: client, ctx: ctx, background: map[string]bool{}, deny: map[string]bool{}, enforce: map[string]bool{}, controlled: map[string]controllerPolicy{},
		created: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c"}, []string{"kind"}), withheld: prometheus.NewCounter(prometheus.CounterOpts{Name: "w"})}
	enforced := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"rules": []any{
		map[string]any{"name": "r", "validate": map[string]any{"failureAction": "Enforce"}}}}}}
	enforced.SetName("enforced")
	audited := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"validationFailureAction": "Audit"}}}
	audited.SetName("audited")
	s.remember(gvrClusterPolicy, enforced)
	s.remember(gvrClusterPolicy, audited)
	vp := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"validationActions": []any{"Audit"}}}}
	vp.SetName("vp")
	s.remember(gvrValidatingPolicy, vp)

	result := func(policy, source string) wgv1alpha2.PolicyReportResult {
		return wgv1alpha2.PolicyReportResult{Policy: policy, Rule: "r", Result: wgv1alpha2.ResultFail, Source: source}
	}
	a := admission.Admitted{
		Request:      &admissionv1.AdmissionRequest{UID: "req-1"},
		Subject:      report.Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "app", UID: "u1"},
		GVR:          schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Results:      []wgv1alpha2.PolicyReportResult{result("enforced", engine.SourceKyverno), result("audited", engine.SourceKyverno), result("vp", engine.SourceValidatingPolicy)},
		PolicyLabels: map[string]string{"cpol.kyverno.io/enforced": "1", "cpol.kyverno.io/audited": "2", "vpol.kyverno.io/vp": "3"},
	}
	s.write(a) // returns although the classic creates hang
	mu.Lock()
	if len(created) != 1 || firstPolicy(created[0]) != "vp" {
		t.Fatalf("when write returned (the answer): %d reports, want the ValidatingPolicy's alone", len(created))
	}
	mu.Unlock()
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(created)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reports after the answer, want 3 (one per handler)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string][]string{}
	for _, u := range created {
		var keys []string
		for k := range maps.Keys(u.GetLabels()) {
			if strings.HasPrefix(k, "cpol.kyverno.io/") || strings.HasPrefix(k, "vpol.kyverno.io/") {
				keys = append(keys, k)
			}
		}
		got[firstPolicy(u)] = keys
	}
	want := map[string][]string{"vp": {"vpol.kyverno.io/vp"}, "enforced": {"cpol.kyverno.io/enforced"}, "audited": {"cpol.kyverno.io/audited"}}
	for p, w := range want {
		if !slices.Equal(got[p], w) {
			t.Errorf("report of %s: policy labels %v, want %v", p, got[p], w)
		}
	}
}

func firstPolicy(u *unstructured.Unstructured) string {
	results, _, _ := unstructured.NestedSlice(u.Object, "spec", "results")
	var out []string
	for _, r := range results {
		p, _, _ := unstructured.NestedString(r.(map[string]any), "policy")
		out = append(out, p)
	}
	slices.Sort(out)
	return out[0]
}
