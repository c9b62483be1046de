package engine_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/internal/pss"

	"github.com/tally-dev/tally/internal/corpus"
)

// realisticPods are Pods as clusters hold them: an app with a sidecar and an
// init container, a hardened one, and a privileged one.
func realisticPods(tb testing.TB) []map[string]any {
	tb.Helper()
	docs := []string{`{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "checkout-7d9f", "namespace": "shop", "labels": {"app": "checkout", "pod-template-hash": "7d9f"},
    "annotations": {"prometheus.io/scrape": "true"}},
  "spec": {
    "serviceAccountName": "checkout",
    "initContainers": [{"name": "migrate", "image": "registry.example.com/shop/migrate:1.4.2",
      "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}}}],
    "containers": [
      {"name": "app", "image": "registry.example.com/shop/checkout:1.4.2", "ports": [{"containerPort": 8080}],
       "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
       "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 1000,
         "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
       "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}]},
      {"name": "envoy", "image": "envoyproxy/envoy:v1.30.1", "ports": [{"containerPort": 15001}],
       "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}
    ],
    "volumes": [{"name": "config", "configMap": {"name": "checkout"}}, {"name": "tmp", "emptyDir": {}}]
  }}`, `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "api-5c6b", "namespace": "shop", "labels": {"app": "api"}},
  "spec": {
    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "api", "image": "registry.example.com/shop/api:2.0.0",
      "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
  }}`, `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "node-agent-x2", "namespace": "monitoring", "labels": {"app": "node-agent"}},
  "spec": {
    "hostNetwork": true, "hostPID": true,
    "containers": [{"name": "agent", "image": "example/agent:latest", "ports": [{"containerPort": 9100, "hostPort": 9100}],
      "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}}}],
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}]
  }}`}
	out := make([]map[string]any, len(docs))
	for i, d := range docs {
		if err := json.Unmarshal([]byte(d), &out[i]); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// BenchmarkPodSecurityPolicies evaluates every rule of the Pod Security
// Standards policies against realistic Pods. It reports rule evaluations
// per second (on one core with -cpu 1) and allocations per rule evaluation.
// Its CEL twins are BenchmarkPodSecurityCEL (validate.cel rules) and
// BenchmarkPodSecurityValidatingPolicies.
func BenchmarkPodSecurityPolicies(b *testing.B) { benchmarkPolicySet(b, "pod-security") }

// BenchmarkPodSecurityCEL is BenchmarkPodSecurityPolicies with the
// validate.cel twins of the policies.
func BenchmarkPodSecurityCEL(b *testing.B) { benchmarkPolicySet(b, "pod-security-cel") }

// BenchmarkPodSecurityValidatingPolicies is BenchmarkPodSecurityPolicies
// with the ValidatingPolicy twins of the policies.
func BenchmarkPodSecurityValidatingPolicies(b *testing.B) { benchmarkPolicySet(b, "pod-security-vpol") }

func benchmarkPolicySet(b *testing.B, set string) {
	policies := pss.Load(b, corpus.Path(b, "policy-library", set))
	pods := realisticPods(b)
	ctx := context.Background()
	reqs := make([]*engine.Request, len(pods))
	for i, p := range pods {
		reqs[i] = &engine.Request{Object: p, Background: true}
	}
	rules := 0
	for _, req := range reqs {
		for _, p := range policies {
			rules += len(p.Evaluate(ctx, req))
		}
	}
	if rules == 0 {
		b.Fatal("no rule applied")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, req := range reqs {
			for _, p := range policies {
				p.Evaluate(ctx, req)
			}
		}
	}
	b.StopTimer()
	evals := float64(b.N) * float64(rules)
	b.ReportMetric(evals/b.Elapsed().Seconds(), "rule-evals/s")
	b.ReportMetric(float64(testing.AllocsPerRun(1, func() {
		for _, req := range reqs {
			for _, p := range policies {
				p.Evaluate(ctx, req)
			}
		}
	}))/float64(rules), "allocs/rule-eval")
	b.ReportMetric(float64(rules)/float64(len(pods)), "rules/pod")
}
