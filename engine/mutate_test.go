package engine_test

import (
	"context"
	"encoding/json"
	"testing"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
)

// mutatePod is the Pod the classic mutate cases change.
const mutatePod = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  containers:
  - {name: app, image: "nginx:latest"}
  - {name: side, image: "corp.io/side:1.0", imagePullPolicy: Never}
`

func TestMutateClassic(t *testing.T) {
	cases := []struct {
		name, rule string
		result     wgv1alpha2.Result
		message    string
		// want is the patched Pod, as JSON, when the rule passes.
		want string
	}{
		{
			name:   "strategic-merge-adds-a-label",
			rule:   `    mutate: {patchStrategicMerge: {metadata: {labels: {color: orange}}}}`,
			result: engine.Pass, message: "mutated Pod/web in namespace shop",
			want: `{"metadata":{"labels":{"app":"web","color":"orange"}}}`,
		},
		{
			name:   "nothing-to-change-is-a-skip",
			rule:   `    mutate: {patchStrategicMerge: {metadata: {labels: {app: web}}}}`,
			result: engine.Skip, message: "no patches applied",
		},
		{
			name:   "add-if-not-present-per-container",
			rule:   `    mutate: {patchStrategicMerge: {spec: {containers: [{(name): "*", +(imagePullPolicy): IfNotPresent}]}}}`,
			result: engine.Pass,
			want:   `{"spec":{"containers":[{"name":"app","image":"nginx:latest","imagePullPolicy":"IfNotPresent"},{"name":"side","image":"corp.io/side:1.0","imagePullPolicy":"Never"}]}}`,
		},
		{
			name:   "conditional-anchor-in-a-list-picks-elements",
			rule:   `    mutate: {patchStrategicMerge: {spec: {containers: [{(image): "*:latest", imagePullPolicy: Always}]}}}`,
			result: engine.Pass,
			want:   `{"spec":{"containers":[{"name":"app","image":"nginx:latest","imagePullPolicy":"Always"},{"name":"side","image":"corp.io/side:1.0","imagePullPolicy":"Never"}]}}`,
		},
		{
			name:   "conditional-anchor-in-a-map-that-fails-changes-nothing",
			rule:   `    mutate: {patchStrategicMerge: {metadata: {labels: {(app): api, color: blue}}}}`,
			result: engine.Skip, message: "no patches applied",
		},
		{
			name:   "conditional-anchor-in-a-map-that-holds",
			rule:   `    mutate: {patchStrategicMerge: {metadata: {labels: {(app): web, color: blue}}}}`,
			result: engine.Pass,
			want:   `{"metadata":{"labels":{"app":"web","color":"blue"}}}`,
		},
		{
			name:   "global-anchor-that-holds-for-one-container",
			rule:   `    mutate: {patchStrategicMerge: {spec: {containers: [{<(image): "corp.io/*"}], imagePullSecrets: [{name: regcred}]}}}`,
			result: engine.Pass,
			want:   `{"spec":{"imagePullSecrets":[{"name":"regcred"}]}}`,
		},
		{
			name:   "global-anchor-that-holds-for-none",
			rule:   `    mutate: {patchStrategicMerge: {spec: {containers: [{<(image): "other.io/*"}], imagePullSecrets: [{name: regcred}]}}}`,
			result: engine.Skip, message: "no patches applied",
		},
		{
			name:   "json-patch-adds-under-a-missing-path",
			rule:   "    mutate:\n      patchesJson6902: |-\n        - op: add\n          path: /metadata/annotations/team\n          value: '{{ request.object.metadata.labels.app }}'",
			result: engine.Pass,
			want:   `{"metadata":{"annotations":{"team":"web"}}}`,
		},
		{
			name:   "foreach-per-container",
			rule:   "    mutate:\n      foreach:\n      - list: request.object.spec.containers\n        patchStrategicMerge:\n          spec:\n            containers:\n            - name: '{{ element.name }}'\n              env: [{name: POD, value: web}]",
			result: engine.Pass,
			want:   `{"spec":{"containers":[{"name":"app","image":"nginx:latest","env":[{"name":"POD","value":"web"}]},{"name":"side","image":"corp.io/side:1.0","imagePullPolicy":"Never","env":[{"name":"POD","value":"web"}]}]}}`,
		},
		{
			name:   "preconditions-not-met",
			rule:   "    preconditions: {all: [{key: '{{ request.object.metadata.labels.app }}', operator: Equals, value: api}]}\n    mutate: {patchStrategicMerge: {metadata: {labels: {color: orange}}}}",
			result: engine.Skip, message: "preconditions not met",
		},
		{
			name:   "a-patch-that-does-not-apply-is-an-error",
			rule:   "    mutate:\n      patchesJson6902: |-\n        - op: replace\n          path: /spec/containers/7/image\n          value: x",
			result: engine.Error,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, policy("", tc.rule))
			if !p.MutatesClassic() {
				t.Fatal("the policy has no classic mutate rule")
			}
			obj := resource(t, mutatePod)
			patched, results := p.MutateClassic(context.Background(), &engine.Request{Object: obj})
			if len(results) != 1 {
				t.Fatalf("got %d results, want 1: %+v", len(results), results)
			}
			r := results[0]
			if r.Result != tc.result || (tc.message != "" && r.Message != tc.message) {
				t.Fatalf("got %s %q, want %s %q", r.Result, r.Message, tc.result, tc.message)
			}
			if tc.want == "" {
				return
			}
			// want gives the fields the rule changed; the rest is the Pod's.
			var changed map[string]any
			if err := json.Unmarshal([]byte(tc.want), &changed); err != nil {
				t.Fatal(err)
			}
			expected := resource(t, mutatePod)
			for k, v := range changed {
				merge(expected, k, v)
			}
			a, _ := json.Marshal(patched)
			b, _ := json.Marshal(expected)
			if string(a) != string(b) {
				t.Fatalf("patched:\n%s\nwant:\n%s", a, b)
			}
			if o, _ := json.Marshal(obj); string(o) == string(a) {
				t.Fatal("the request's object was changed in place")
			}
		})
	}
}

// merge writes want's fields over obj's (maps merged, the rest replaced).
func merge(obj map[string]any, k string, v any) {
	if vm, ok := v.(map[string]any); ok {
		if om, ok := obj[k].(map[string]any); ok {
			for kk, vv := range vm {
				merge(om, kk, vv)
			}
			return
		}
	}
	obj[k] = v
}

func TestMutateExistingTargets(t *testing.T) {
	p := compile(t, `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: label-secrets}
spec:
  rules:
  - name: on-configmap
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    mutate:
      targets:
      - {apiVersion: v1, kind: Secret, name: "s-*", namespace: "{{ request.object.metadata.namespace }}"}
      patchStrategicMerge: {metadata: {labels: {from: '{{ request.object.metadata.name }}'}}}
`)
	trigger := resource(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: cm, namespace: a}}`)
	targets := []map[string]any{
		resource(t, `{apiVersion: v1, kind: Secret, metadata: {name: s-1, namespace: a}}`),
		resource(t, `{apiVersion: v1, kind: Secret, metadata: {name: s-2, namespace: b}}`),
		resource(t, `{apiVersion: v1, kind: Secret, metadata: {name: other, namespace: a}}`),
		resource(t, `{apiVersion: v1, kind: Secret, metadata: {name: s-3, namespace: a, labels: {from: cm}}}`),
	}
	if _, results := p.MutateClassic(context.Background(), &engine.Request{Object: trigger}); len(results) != 0 {
		t.Fatalf("a mutateExisting rule changed its trigger: %+v", results)
	}
	got := p.MutateExisting(context.Background(), &engine.Request{Object: trigger}, targets)
	if len(got) != 2 {
		t.Fatalf("got %d target results, want 2 (s-1 and s-3 of namespace a): %+v", len(got), got)
	}
	if got[0].Result != engine.Pass || got[0].Message != "mutated Secret/s-1 in namespace a" {
		t.Fatalf("s-1: %s %q", got[0].Result, got[0].Message)
	}
	if l, _ := got[0].Target["metadata"].(map[string]any)["labels"].(map[string]any); l["from"] != "cm" {
		t.Fatalf("s-1 not labelled: %v", got[0].Target)
	}
	if got[1].Result != engine.Skip {
		t.Fatalf("s-3, already labelled: %s %q", got[1].Result, got[1].Message)
	}
	if _, ok := targets[0]["metadata"].(map[string]any)["labels"]; ok {
		t.Fatal("the target was changed in place")
	}
}

func TestGenerateClassic(t *testing.T) {
	p := compile(t, `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: namespace-defaults}
spec:
  rules:
  - name: quota
    match: {any: [{resources: {kinds: [Namespace]}}]}
    preconditions: {all: [{key: '{{ request.object.metadata.labels.tier || '''' }}', operator: NotEquals, value: system}]}
    generate:
      apiVersion: v1
      kind: ResourceQuota
      name: default
      namespace: '{{ request.object.metadata.name }}'
      data: {metadata: {labels: {team: '{{ request.object.metadata.labels.team }}'}}, spec: {hard: {pods: "10"}}}
  - name: pull-secret
    match: {any: [{resources: {kinds: [Namespace]}}]}
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: '{{ request.object.metadata.name }}'
      clone: {namespace: default, name: regcred}
`)
	source := resource(t, `{apiVersion: v1, kind: Secret, metadata: {name: regcred, namespace: default, uid: u1, resourceVersion: "7"}, data: {k: dg==}}`)
	ns := resource(t, `{apiVersion: v1, kind: Namespace, metadata: {name: shop, labels: {team: a}}}`)
	got := p.GenerateClassic(context.Background(), &engine.Request{Object: ns}, []map[string]any{source})
	if len(got) != 2 || got[0].Result != engine.Pass || got[1].Result != engine.Pass {
		t.Fatalf("got %+v", got)
	}
	quota, _ := json.Marshal(got[0].Generated)
	if string(quota) != `[{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"labels":{"team":"a"},"name":"default","namespace":"shop"},"spec":{"hard":{"pods":"10"}}}]` {
		t.Fatalf("quota: %s", quota)
	}
	secret, _ := json.Marshal(got[1].Generated)
	if string(secret) != `[{"apiVersion":"v1","data":{"k":"dg=="},"kind":"Secret","metadata":{"name":"regcred","namespace":"shop"}}]` {
		t.Fatalf("secret: %s", secret)
	}
	system := resource(t, `{apiVersion: v1, kind: Namespace, metadata: {name: kube-x, labels: {tier: system}}}`)
	got = p.GenerateClassic(context.Background(), &engine.Request{Object: system}, nil)
	if len(got) != 2 || got[0].Result != engine.Skip || got[1].Result != engine.Error {
		t.Fatalf("system namespace, no clone source: %+v", got)
	}
}

func TestGenerateCEL(t *testing.T) {
	p, err := engine.CompileGeneratingPolicy([]byte(`{"apiVersion":"policies.kyverno.io/v1","kind":"GeneratingPolicy","metadata":{"name":"cm"},
"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["namespaces"]}]},
"matchConditions":[{"name":"not-system","expression":"!object.metadata.name.startsWith('kube-')"}],
"variables":[{"name":"cm","expression":"[{'apiVersion': dyn('v1'), 'kind': dyn('ConfigMap'), 'metadata': dyn({'name': 'team'}), 'data': dyn({'ns': object.metadata.name})}]"}],
"generate":[{"expression":"generator.Apply(object.metadata.name, variables.cm)"},
 {"template":{"value":"apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: fixed}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c2, namespace: fixed}\n"}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	g, ok := p.GenerateCEL(context.Background(), &engine.Request{Object: resource(t, `{apiVersion: v1, kind: Namespace, metadata: {name: shop}}`)})
	if !ok || g.Result != engine.Pass || g.Message != engine.MessageGenerated {
		t.Fatalf("got %v %+v", ok, g)
	}
	out, _ := json.Marshal(g.Generated)
	if string(out) != `[{"apiVersion":"v1","data":{"ns":"shop"},"kind":"ConfigMap","metadata":{"name":"team","namespace":"shop"}},{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"fixed"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c2","namespace":"fixed"}}]` {
		t.Fatalf("generated %s", out)
	}
	if _, ok := p.GenerateCEL(context.Background(), &engine.Request{Object: resource(t, `{apiVersion: v1, kind: Namespace, metadata: {name: kube-x}}`)}); ok {
		t.Fatal("a trigger whose match conditions do not hold generated")
	}
	if _, err := engine.CompileGeneratingPolicy([]byte(`{"kind":"GeneratingPolicy","metadata":{"name":"bad"},"spec":{"matchConstraints":{},"generate":[{"expression":"generator.Apply('x', 1)"}]}}`)); err == nil {
		t.Fatal("an expression that does not type-check was accepted")
	}
}
