package scan

import (
	"context"
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
)

// controlScanner is a scanner whose policies match ConfigMaps, served by
// a discovery of that kind only; no watch is started.
func controlScanner(t *testing.T) *Scanner {
	s := testScanner(t, Options{NoPolicyStatus: true})
	s.handlers.kinds.disc = listDiscovery{lists: []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}}}}
	s.handlers.kinds.remember(gvrConfigMaps, "", "ConfigMap")
	s.handlers.kinds.users[gvrConfigMaps] = map[string]bool{"(kept by the test)": true}
	return s
}

func policyKeys(s *Scanner) []string {
	keys := s.handlers.policies.keysOf(apiresources.ClusterPolicy)
	slices.Sort(keys)
	return keys
}

func stub(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": name}}}
}

func TestPolicyHandlersOnlyQueueAndTheWorkerApplies(t *testing.T) {
	s := controlScanner(t)
	ctx := context.Background()
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("a", "first"))
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("a", "second"))
	if got := policyKeys(s); len(got) != 0 {
		t.Fatalf("policies known before the worker ran: %v", got)
	}
	if n := s.handlers.control.queue.Len(); n != 1 {
		t.Errorf("control queue holds %d keys, want 1 (one object, its newest event)", n)
	}
	settle(t, s)
	if got := policyKeys(s); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("policies = %v, want [a]", got)
	}
	if msg := s.handlers.policies.get("a").compiled.Rules[0].Raw.Validate.Message; msg != "second" {
		t.Errorf("applied version says %q, want the newest (second)", msg)
	}
	s.handlers.Remove(ctx, apiresources.ClusterPolicy, stub("a"))
	if got := policyKeys(s); len(got) != 1 {
		t.Errorf("policy forgotten before the worker ran: %v", got)
	}
	settle(t, s)
	if got := policyKeys(s); len(got) != 0 {
		t.Errorf("policies after the delete = %v, want none", got)
	}
}

// A complete list applies after the events ahead of it, and an object
// upserted after the list is not taken for one the list lacks.
func TestAPolicyListAppliesAfterItsEventsAndBeforeNewerOnes(t *testing.T) {
	s := controlScanner(t)
	ctx := context.Background()
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("kept", "m"))
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("gone", "m"))
	settle(t, s)
	// A relist: "gone" was changed, then deleted while the watch was away;
	// its change is still queued when the list without it comes.
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("gone", "changed"))
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("kept", "m"))
	s.handlers.Replace(ctx, apiresources.ClusterPolicy, []*unstructured.Unstructured{stub("kept")})
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("new", "m")) // after the list
	delete(s.handlers.kinds.synced, sourceKey{gvr: apiresources.ClusterPolicy})
	s.handlers.Listed(ctx, apiresources.ClusterPolicy)
	if s.handlers.kinds.synced[sourceKey{gvr: apiresources.ClusterPolicy}] {
		t.Fatal("listed before the list was applied")
	}
	// The list and its end wait for the events queued after them (they
	// are queued again 10 ms later): the worker takes keys until the
	// ClusterPolicies' end of list is applied.
	for !s.handlers.kinds.synced[sourceKey{gvr: apiresources.ClusterPolicy}] {
		if !s.handlers.control.processNext(ctx, s.reconciler) {
			t.Fatal("control queue shut down")
		}
	}
	if got := policyKeys(s); !slices.Equal(got, []string{"kept", "new"}) {
		t.Errorf("policies = %v, want [kept new]", got)
	}
	if !s.handlers.kinds.synced[sourceKey{gvr: apiresources.ClusterPolicy}] {
		t.Error("ClusterPolicies not listed once the list was applied")
	}
}

// A change that cannot be applied is retried with the queue's backoff, and
// the version applied is the newest one.
func TestAControlEventThatFailsIsRetriedWithItsNewestVersion(t *testing.T) {
	var applied []string
	failures := 1
	c := newControlQueue()
	a := applierFunc(func(_ context.Context, ev *controlEvent) error {
		msg := ev.obj.GetAnnotations()["v"]
		if failures > 0 {
			failures--
			return errors.New("store write failed")
		}
		applied = append(applied, msg)
		return nil
	})
	defer c.queue.ShutDown()
	version := func(v string) *unstructured.Unstructured {
		u := stub("p")
		u.SetAnnotations(map[string]string{"v": v})
		return u
	}
	ctx := context.Background()
	c.event(apiresources.ClusterPolicy, version("1"), false)
	c.processNext(ctx, a) // fails: queued again after the backoff
	if len(applied) != 0 || !c.waiting(apiresources.ClusterPolicy, false) {
		t.Fatalf("after a failure: applied %v, waiting %v; want nothing applied, the change kept", applied, c.waiting(apiresources.ClusterPolicy, false))
	}
	c.event(apiresources.ClusterPolicy, version("2"), false) // newer, while the first waits
	for c.waiting(apiresources.ClusterPolicy, false) {
		c.processNext(ctx, a) // blocks until the retry is due
	}
	if !slices.Equal(applied, []string{"2"}) {
		t.Errorf("applied %v, want [2] (the newest version, once)", applied)
	}
}

// A list's key that comes again once the list was applied (a delayed
// retry, a relist's) finds no list, which is not an empty one.
func TestAListAppliedTwiceDropsNothing(t *testing.T) {
	s := controlScanner(t)
	ctx := context.Background()
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("kept", "m"))
	s.handlers.Replace(ctx, apiresources.ClusterPolicy, []*unstructured.Unstructured{stub("kept")})
	settle(t, s)
	if err := s.handlers.control.apply(ctx, s.reconciler, keyReplace+apiresources.ClusterPolicy.String()); err != nil {
		t.Fatal(err)
	}
	if got := policyKeys(s); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("policies = %v, want [kept]", got)
	}
}

// applierFunc applies events with a function, and lists and list ends as
// nothing.
type applierFunc func(context.Context, *controlEvent) error

func (f applierFunc) applyEvent(ctx context.Context, ev *controlEvent) error { return f(ctx, ev) }
func (applierFunc) applyList(context.Context, schema.GroupVersionResource, []*unstructured.Unstructured) error {
	return nil
}
func (applierFunc) listed(schema.GroupVersionResource) {}
