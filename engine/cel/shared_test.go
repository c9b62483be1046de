package cel

import (
	"context"
	"fmt"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func sharedTestObject() map[string]any {
	return Normalize(map[string]any{
		"metadata": map[string]any{"name": "web", "labels": map[string]any{"app": "web", "tier": "front"}},
		"spec": map[string]any{
			"replicas": float64(3),
			"containers": []any{
				map[string]any{"name": "app", "image": "nginx:1.27", "ports": []any{map[string]any{"containerPort": float64(80)}},
					"securityContext": map[string]any{"capabilities": map[string]any{"drop": []any{"ALL"}}}},
				map[string]any{"name": "sidecar", "image": "envoy:1.30"},
			},
			"volumes": []any{},
			"empty":   map[string]any{},
			"nothing": nil,
		},
	}).(map[string]any)
}

// A Shared object reads, compares, iterates, converts and fails exactly as
// the plain object does: every expression gives the same outcome and the
// same error text either way, in both modes.
func TestSharedValuesBehaveAsPlainOnes(t *testing.T) {
	exprs := []string{
		"object.metadata.name == 'web'",
		"object.metadata.labels == {'app': 'web', 'tier': 'front'}",
		"{'tier': 'front', 'app': 'web'} == object.metadata.labels",
		"object.metadata.labels != {'app': 'web'}",
		"object.spec.containers == object.spec.containers",
		"object.spec.containers[0] == {'name': dyn('app'), 'image': dyn('nginx:1.27'), 'ports': dyn([{'containerPort': 80}]), 'securityContext': dyn({'capabilities': {'drop': ['ALL']}})}",
		"object.spec.replicas + 1 == 4",
		"size(object.spec.containers) == 2 && object.spec.containers.size() == 2",
		"size(object.metadata.labels) == 2",
		"has(object.spec.containers) && !has(object.spec.initContainers)",
		"has(object.spec.nothing) && object.spec.nothing == null",
		"'app' in object.metadata.labels && !('x' in object.metadata.labels)",
		"'ALL' in object.spec.containers[0].securityContext.capabilities.drop",
		"{'name': 'sidecar', 'image': 'envoy:1.30'} in object.spec.containers",
		"object.spec.containers.all(c, c.image.contains(':'))",
		"object.spec.containers.exists(c, c.name == 'sidecar')",
		"object.spec.containers.exists_one(c, has(c.ports))",
		"object.spec.containers.map(c, c.name) == ['app', 'sidecar']",
		"object.spec.containers.filter(c, has(c.securityContext)).size() == 1",
		"object.spec.containers.all(i, c, i < 2 && c.name != '')",
		"object.spec.containers.exists(i, c, i == 1 && c.name == 'sidecar')",
		"object.metadata.labels.all(k, k in ['app', 'tier'])",
		"object.metadata.labels.exists(k, v, k == 'app' && v == 'web')",
		"(object.spec.containers + [{'name': 'x'}]).size() == 3",
		"([{'name': 'x'}] + object.spec.containers)[1].name == 'app'",
		"object.spec.volumes.size() == 0 && object.spec.empty.size() == 0",
		"object.?spec.?containers[?0].?name.orValue('') == 'app'",
		"object.spec.?initContainers.orValue([]).size() == 0",
		"object.spec.containers[0].securityContext.capabilities.drop.orValue([]) == ['ALL']",
		"type(object.spec) == map && type(object.spec.containers) == list",
		"dyn(object).spec.containers[1].image.startsWith('envoy')",
		"string(object.spec.replicas) == '3'",
		// Failures: the messages must match too.
		"object.spec.nothere == 1",
		"object.spec.containers[5].name == 'x'",
		"object.spec.containers[-1].name == 'x'",
		"object.spec.containers['a'] == 1",
		"object.metadata.labels[1] == 'x'",
		"object.spec.containers[0].ports[0].nothere == 1",
		"object.spec.containers == 1",
		"object.metadata.labels + 1 == 2",
	}
	for _, mode := range []Mode{ModeKubernetes, ModeKyverno} {
		for _, e := range exprs {
			p, err := Compile(Spec{Mode: mode, Validations: []admissionregistrationv1.Validation{{Expression: e}}})
			if err != nil {
				t.Fatalf("%s: %v", e, err)
			}
			obj := sharedTestObject()
			plain := p.Evaluate(context.Background(), &Input{Object: obj, OldObject: obj})
			shared := p.Evaluate(context.Background(), &Input{Object: Shared(obj), OldObject: Shared(obj)})
			if describe(plain) != describe(shared) {
				t.Errorf("mode %v, %s:\n plain  %s\n shared %s", mode, e, describe(plain), describe(shared))
			}
		}
	}
}

func describe(o Outcome) string {
	return fmt.Sprintf("notMet=%v failed=%d err=%v", o.NotMet, o.Failed, o.Err)
}

// One Shared object read by many evaluations at once (run with -race).
func TestSharedValuesAreSafeForConcurrentReads(t *testing.T) {
	p, err := Compile(Spec{Mode: ModeKubernetes, Validations: []admissionregistrationv1.Validation{{
		Expression: "object.spec.containers.all(c, c.name != '' && (!has(c.ports) || c.ports.all(p, p.containerPort > 0)))",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	in := &Input{Object: Shared(sharedTestObject())}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if out := p.Evaluate(context.Background(), in); out.Failed != -1 {
					errs <- describe(out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
