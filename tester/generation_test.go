package tester

import (
	"strings"
	"testing"
)

const generatingPolicies = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: quota}
spec:
  rules:
  - name: quota
    match: {any: [{resources: {kinds: [Namespace]}}]}
    generate:
      apiVersion: v1
      kind: ResourceQuota
      name: default
      namespace: '{{ request.object.metadata.name }}'
      data: {spec: {hard: {pods: "10"}}}
---
apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata: {name: cm}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [namespaces]}]
  generate:
  - expression: "generator.Apply(object.metadata.name, [{'apiVersion': dyn('v1'), 'kind': dyn('ConfigMap'), 'metadata': dyn({'name': 'team'}), 'data': dyn({'k': 'v'})}])"
`

// Classic generate rules and GeneratingPolicies are evaluated: each
// generated resource is compared whole with the test's document, and a
// difference fails the expectation, naming where.
func TestGeneratedResources(t *testing.T) {
	for _, tc := range []struct {
		name, pods, value string
		failed            []string
	}{
		{name: "as-expected", pods: "10", value: "v"},
		{name: "quota-differs", pods: "20", value: "v", failed: []string{"quota: the generated resource differs from quota.yaml at .spec.hard.pods"}},
		{name: "configmap-differs", pods: "10", value: "w", failed: []string{"cm: the generated resource differs from cm.yaml at .data.k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outcomes := runTestFiles(t, map[string]string{
				"policy.yaml": generatingPolicies,
				"ns.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
				"quota.yaml":  "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: default, namespace: shop}\nspec: {hard: {pods: \"" + tc.pods + "\"}}\n",
				"cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: team, namespace: shop}\ndata: {k: " + tc.value + "}\n",
				TestFileName: `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: generated}
policies: [policy.yaml]
resources: [ns.yaml]
results:
- {policy: quota, rule: quota, resources: [shop], kind: Namespace, result: pass, generatedResource: quota.yaml}
- {policy: cm, isGeneratingPolicy: true, resources: [shop], kind: Namespace, result: pass, generatedResource: cm.yaml}
`,
			})
			var failed []string
			for _, o := range outcomes {
				switch o.Status {
				case Passed:
				case Failed:
					failed = append(failed, o.Policy+": "+o.Reason)
				default:
					t.Errorf("%s: %s (%s): a generate expectation is evaluated", o.Policy, o.Status, o.Reason)
				}
			}
			if len(outcomes) != 2 || strings.Join(failed, ";") != strings.Join(tc.failed, ";") {
				t.Fatalf("failed %q, want %q (%+v)", failed, tc.failed, outcomes)
			}
		})
	}
}
