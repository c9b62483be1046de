package admission

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// Coverage asks once per kind and TTL whether list and watch are allowed,
// and says no (results written) when it cannot tell.
func TestCoverageAsksOncePerKindAndSaysNoWhenUnsure(t *testing.T) {
	kube := fake.NewSimpleClientset()
	asked, fail := 0, false
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		asked++
		if fail {
			return true, nil, errors.New("authorization API unreachable")
		}
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		r.Status.Allowed = r.Spec.ResourceAttributes.Resource != "secrets"
		return true, r, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := NewCoverage(kube.AuthorizationV1().SelfSubjectAccessReviews(), time.Minute)
	c.clock = clk
	ctx := context.Background()
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	if !c.Scanned(ctx, pods) || !c.Scanned(ctx, pods) {
		t.Fatal("pods: want scanned")
	}
	if asked != 2 {
		t.Errorf("%d reviews for one kind, want 2 (list, watch) once", asked)
	}
	if c.Scanned(ctx, schema.GroupVersionResource{Version: "v1", Resource: "secrets"}) {
		t.Error("secrets: want not scanned (not readable)")
	}
	fail = true
	clk.Step(2 * time.Minute)
	if c.Scanned(ctx, pods) {
		t.Error("a kind whose review failed counts as scanned: its results would be lost")
	}
}

// What Coverage remembers is bounded whatever kinds reviews name (forged
// reviews may name made-up ones): past the bound, expired answers go first,
// and with none expired a new answer is not kept.
func TestCoverageIsBounded(t *testing.T) {
	kube := fake.NewSimpleClientset()
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		r.Status.Allowed = true
		return true, r, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := NewCoverage(kube.AuthorizationV1().SelfSubjectAccessReviews(), time.Minute)
	c.clock = clk
	ctx := context.Background()
	for i := range maxCoverageEntries + 10 {
		c.Scanned(ctx, schema.GroupVersionResource{Group: "made.up", Version: "v1", Resource: fmt.Sprintf("kind%d", i)})
	}
	if n := len(c.known); n != maxCoverageEntries {
		t.Errorf("%d answers kept, want the bound %d", n, maxCoverageEntries)
	}
	clk.Step(2 * time.Minute)
	c.Scanned(ctx, schema.GroupVersionResource{Version: "v1", Resource: "pods"})
	if n := len(c.known); n != 1 {
		t.Errorf("%d answers kept once the others expired, want 1", n)
	}
}

// The scan's coverage is asked only of resources discovery serves: a
// forged review naming a made-up resource does not reach it.
func TestCoverageIsAskedOnlyOfServedResources(t *testing.T) {
	kube := fake.NewSimpleClientset()
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Kind: "Pod", Namespaced: true}}}}
	b := &Bridge{disc: kube.Discovery()}
	if !b.servedKind(schema.GroupVersionResource{Version: "v1", Resource: "pods"}) {
		t.Error("pods: want served")
	}
	for _, gvr := range []schema.GroupVersionResource{{Version: "v1", Resource: "widgets"}, {Group: "made.up", Version: "v1", Resource: "pods"}} {
		if b.servedKind(gvr) {
			t.Errorf("%s: want not served", gvr)
		}
	}
}
