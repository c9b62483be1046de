package scan

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

func compiledPolicy(t *testing.T, doc string) *engine.Policy {
	t.Helper()
	var p kyvernov1.ClusterPolicy
	if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	c, err := engine.CompileClusterPolicy(&p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAPanickingRuleIsAnErrorAndTheOthersKeepTheirResults(t *testing.T) {
	p := compiledPolicy(t, `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: good
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
  - name: bad
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
  - name: secrets-only
    match: {any: [{resources: {kinds: [Secret]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`)
	real := evaluatePolicy
	defer func() { evaluatePolicy = real }()
	evaluatePolicy = func(p *engine.Policy, ctx context.Context, req *engine.Request) []engine.RuleResult {
		for _, r := range p.Rules {
			if r.Name == "bad" {
				var m map[string]int
				m["boom"]++ // a real runtime panic: assignment to a nil map
			}
		}
		return real(p, ctx, req)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s := New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), nil, store, Options{Registry: reg})
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "namespace": "ns", "annotations": map[string]any{"secret": "s3cr3t"}}}

	got := map[string]engine.RuleResult{}
	for _, rr := range s.evaluator.evaluate(context.Background(), p, &engine.Request{Object: obj, Background: true}) {
		got[rr.Rule] = rr
	}
	if len(got) != 2 {
		t.Fatalf("got %v, want results of good and bad only", got)
	}
	if got["good"].Result != engine.Pass {
		t.Errorf("good: %s, want pass: a panic in one rule must not hide the others (R25)", got["good"].Result)
	}
	if bad := got["bad"]; bad.Result != engine.Error || bad.Policy != "p" || bad.Message != panicMessage {
		t.Errorf("bad: %+v, want an error naming policy p and rule bad", bad)
	}
	if n := testutil.ToFloat64(s.handlers.metrics.evalPanics); n != 1 {
		t.Errorf("%s = %v, want 1", metricEvalPanics, n)
	}
}

// testScanner is a scanner with its sources listed, tracking policies, and
// a fake API server for its reports.
func testScanner(t *testing.T, opts Options, policies ...*engine.Policy) *Scanner {
	t.Helper()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	s := New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), nil, store, opts)
	for _, gvr := range []schema.GroupVersionResource{apiresources.ClusterPolicy, apiresources.Policy, apiresources.PolicyException, apiresources.Namespace} {
		s.handlers.kinds.synced[sourceKey{gvr: gvr}] = true
	}
	s.handlers.kinds.remember(gvrPods, "", "Pod")
	for _, p := range policies {
		tp := newTracked(p.Name, apiresources.ClusterPolicy, p)
		for _, r := range p.Rules {
			tp.ruleKinds[r.Name] = []schema.GroupVersionResource{gvrPods}
		}
		s.handlers.policies.put(tp)
	}
	return s
}

func TestAResourceEvaluationHasADeadline(t *testing.T) {
	p := namedPodsPolicy(t)
	s := testScanner(t, Options{EvalTimeout: time.Nanosecond}, p)
	pod := benchPod(t, 1)
	s.handlers.upsertResource(context.Background(), gvrPods, pod)
	if err := s.evaluator.reconcile(context.Background(), string(pod.GetUID())); err != nil {
		t.Fatal(err)
	}
	results, err := s.handlers.store.Read().Results(string(pod.GetUID()))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Value().Result != "error" || !strings.Contains(results[0].Value().Message, "deadline") {
		t.Fatalf("results %+v, want one error result saying the deadline passed", results)
	}
	if n := testutil.ToFloat64(s.handlers.metrics.evalDeadlines); n != 1 {
		t.Errorf("%s = %v, want 1", metricEvalDeadlines, n)
	}
	if s.opts.EvalTimeout = 0; New(s.client, nil, s.handlers.store, Options{}).opts.EvalTimeout != DefaultEvalTimeout {
		t.Error("no default deadline")
	}
}

func TestRescanQueuesTheResource(t *testing.T) {
	s := testScanner(t, Options{})
	s.Rescan("uid-1")
	if got := drain(s); !got["uid-1"] || len(got) != 1 {
		t.Errorf("queued %v, want uid-1", got)
	}
}
