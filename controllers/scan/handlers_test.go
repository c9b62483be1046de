package scan

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/engine"
)

var gvrConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func exception(policy string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kyverno.io/v2", "kind": "PolicyException",
		"metadata": map[string]any{"name": "ex", "namespace": "ns"},
		"spec": map[string]any{
			"match":      map[string]any{"any": []any{map[string]any{"resources": map[string]any{"kinds": []any{"Pod", "ConfigMap"}}}}},
			"exceptions": []any{map[string]any{"policyName": policy, "ruleNames": []any{"r"}}},
		},
	}}
}

// drain empties the queue and returns what it held.
func drain(s *Scanner) map[string]bool {
	out := map[string]bool{}
	for s.handlers.queue.Len() > 0 {
		k, _ := s.handlers.queue.Get()
		out[k] = true
		s.handlers.queue.Done(k)
		s.handlers.queue.Forget(k)
	}
	return out
}

func TestAnExceptionChangeRescansThePoliciesOfItsOldAndNewVersions(t *testing.T) {
	policy := func(name, kind string) *engine.Policy {
		return compiledPolicy(t, `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: `+name+`}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [`+kind+`]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`)
	}
	s := testScanner(t, Options{}, policy("pods", "Pod"))
	cms := policy("configmaps", "ConfigMap")
	s.handlers.kinds.remember(gvrConfigMaps, "", "ConfigMap")
	tp := newTracked("configmaps", apiresources.ClusterPolicy, cms)
	tp.ruleKinds["r"] = []schema.GroupVersionResource{gvrConfigMaps}
	s.handlers.policies.put(tp)
	pod := benchPod(t, 1)
	s.handlers.upsertResource(context.Background(), gvrPods, pod)
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "ns", "uid": "cm-uid", "resourceVersion": "1"}}}
	s.handlers.upsertResource(context.Background(), gvrConfigMaps, cm)
	drain(s)

	podUID, cmUID := string(pod.GetUID()), "cm-uid"
	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"created for pods", func() { s.handlers.Upsert(context.Background(), apiresources.PolicyException, exception("pods")) }, []string{podUID}},
		{"edited from pods to configmaps", func() { s.handlers.Upsert(context.Background(), apiresources.PolicyException, exception("configmaps")) }, []string{podUID, cmUID}},
		{"edited to an invalid version", func() {
			bad := exception("configmaps")
			bad.Object["spec"].(map[string]any)["match"] = "not a match"
			s.handlers.Upsert(context.Background(), apiresources.PolicyException, bad)
		}, []string{cmUID}},
		{"created again for pods", func() { s.handlers.Upsert(context.Background(), apiresources.PolicyException, exception("pods")) }, []string{podUID}},
		{"deleted", func() { s.handlers.Remove(context.Background(), apiresources.PolicyException, exception("pods")) }, []string{podUID}},
	}
	for _, step := range steps {
		step.do()
		settle(t, s)
		got := drain(s)
		if len(got) != len(step.want) {
			t.Errorf("%s: rescanned %v, want %v", step.name, got, step.want)
			continue
		}
		for _, uid := range step.want {
			if !got[uid] {
				t.Errorf("%s: rescanned %v, want %v", step.name, got, step.want)
			}
		}
	}
	if xs := s.reconciler.exceptions.compiled(); len(xs) != 0 {
		t.Errorf("%d exceptions left after the delete", len(xs))
	}
}

// settle applies the queued control events, as Run's control worker does.
func settle(t *testing.T, s *Scanner) {
	t.Helper()
	for s.handlers.control.queue.Len() > 0 {
		if !s.handlers.control.processNext(context.Background(), s.reconciler) {
			t.Fatal("control queue shut down")
		}
	}
}

// A resource met before the policies are listed waits for them and is
// queued once when they are, not again later (a hand-over stores the
// shard's resources while its policies are still being applied: each
// evaluated twice was 6-14% more work).
func TestAResourceMetBeforeThePoliciesIsQueuedOnceWhenTheyAreListed(t *testing.T) {
	p := namedPodsPolicy(t)
	s := testScanner(t, Options{}, p)
	delete(s.handlers.kinds.synced, sourceKey{gvr: apiresources.ClusterPolicy})
	ctx := context.Background()
	pod := benchPod(t, 1)
	uid := string(pod.GetUID())
	s.handlers.upsertResource(ctx, gvrPods, pod)
	if got := drain(s); !got[uid] {
		t.Fatalf("the stored pod was not queued: %v", got)
	}
	if err := s.evaluator.reconcile(ctx, uid); err != nil {
		t.Fatal(err)
	}
	// Queued again neither now nor later (a retry after a delay).
	if got := drain(s); len(got) != 0 || s.handlers.queue.Delayed() != 0 {
		t.Fatalf("queued again before the policies were listed: %v (%d delayed)", got, s.handlers.queue.Delayed())
	}
	s.handlers.listedIn(apiresources.ClusterPolicy, "")
	if got := drain(s); len(got) != 1 || !got[uid] {
		t.Fatalf("queued when the policies were listed: %v, want the pod once", got)
	}
	if err := s.evaluator.reconcile(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if got := drain(s); len(got) != 0 || s.handlers.queue.Delayed() != 0 {
		t.Errorf("queued again after its evaluation: %v (%d delayed)", got, s.handlers.queue.Delayed())
	}
	if n := testutil.ToFloat64(s.handlers.metrics.resources); n != 1 {
		t.Errorf("%s = %v, want 1", metricResources, n)
	}
}

// A resource that waited for the policies, and that a policy's application
// queued again, is evaluated once: when it is taken from the queue after
// the policies are listed, it no longer waits.
func TestAWaitingResourceEvaluatedBeforeItsReleaseIsNotQueuedAgain(t *testing.T) {
	p := namedPodsPolicy(t)
	s := testScanner(t, Options{}, p)
	synced := sourceKey{gvr: apiresources.ClusterPolicy}
	delete(s.handlers.kinds.synced, synced)
	ctx := context.Background()
	pod := benchPod(t, 1)
	uid := string(pod.GetUID())
	s.handlers.upsertResource(ctx, gvrPods, pod)
	drain(s)
	if err := s.evaluator.reconcile(ctx, uid); err != nil { // waits
		t.Fatal(err)
	}
	// The policies' list is applied (queuing the pod again), then marked
	// listed; the worker takes the pod before the waiting ones are released.
	s.handlers.kinds.synced[synced] = true
	if err := s.evaluator.reconcile(ctx, uid); err != nil {
		t.Fatal(err)
	}
	s.handlers.listedIn(apiresources.ClusterPolicy, "")
	if got := drain(s); len(got) != 0 {
		t.Errorf("queued again after its evaluation: %v", got)
	}
	if n := testutil.ToFloat64(s.handlers.metrics.resources); n != 1 {
		t.Errorf("%s = %v, want 1", metricResources, n)
	}
}

// R47: with --exception-namespace, a PolicyException of another namespace
// (a tenant's) exempts nothing: ignored, counted, and one stored before
// goes; one of that namespace applies. Kyverno's default is every
// namespace.
func TestExceptionsOnlyFromTheExceptionNamespace(t *testing.T) {
	policy := compiledPolicy(t, `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: pods}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`)
	s := testScanner(t, Options{Exceptions: engine.ExceptionScope{Namespace: "platform"}}, policy)
	tenants := exception("pods") // in namespace ns
	s.handlers.Upsert(context.Background(), apiresources.PolicyException, tenants)
	settle(t, s)
	if xs := s.reconciler.exceptions.compiled(); len(xs) != 0 {
		t.Errorf("an exception of namespace ns applies under --exception-namespace platform")
	}
	if got := testutil.ToFloat64(s.handlers.metrics.exceptionsIgnored); got != 1 {
		t.Errorf("exceptions ignored = %v, want 1", got)
	}
	platform := exception("pods")
	platform.SetNamespace("platform")
	s.handlers.Upsert(context.Background(), apiresources.PolicyException, platform)
	settle(t, s)
	if xs := s.reconciler.exceptions.compiled(); len(xs) != 1 {
		t.Errorf("%d exceptions apply, want the platform namespace's", len(xs))
	}
	for allowed, want := range map[string]bool{"": true, "*": true, "ns": true, "platform": false} {
		if got := engine.ExceptionNamespaceAllowed(allowed, "ns"); got != want {
			t.Errorf("ExceptionNamespaceAllowed(%q, ns) = %v, want %v", allowed, got, want)
		}
	}
}
