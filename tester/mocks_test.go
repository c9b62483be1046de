package tester

import (
	"strings"
	"testing"
)

const mockedPolicies = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: external}
spec:
  rules:
  - name: allowed
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: verdict
      apiCall: {service: {url: "https://checker.example/api/{{ request.object.metadata.name }}"}, jmesPath: allowed}
    validate:
      deny: {conditions: {any: [{key: "{{ verdict }}", operator: Equals, value: false}]}}
  - name: quota
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: pods
      globalReference: {name: pods-entry, jmesPath: "items | length(@)"}
    validate:
      deny: {conditions: {any: [{key: "{{ pods }}", operator: GreaterThan, value: 2}]}}
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: external-cel}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: http.Get("https://checker.example/api/web").body.allowed == true && size(globalContext.Get("pods-entry", "items")) <= 2
`

const mockedPod = `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec: {containers: [{name: c, image: nginx}]}
`

func mockedTest(allowed string, pods int) string {
	items := strings.Repeat("\n    - {name: p}", pods)
	return `apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: mocked}
policies: [policy.yaml]
resources: [pod.yaml]
apiCallResponses:
- url: https://checker.example/api/web
  response: {statusCode: 200, body: {allowed: ` + allowed + `}}
globalContextEntries:
- name: pods-entry
  data:
    pods:` + items + `
  projections: [{name: items, path: pods}]
results:
- {policy: external, rule: allowed, resources: [web], kind: Pod, result: pass}
- {policy: external, rule: quota, resources: [web], kind: Pod, result: pass}
- {policy: external-cel, isValidatingPolicy: true, resources: [web], kind: Pod, result: pass}
`
}

// A test's apiCallResponses and globalContextEntries are served to classic
// apiCall and globalReference entries and to CEL's http and globalContext
// libraries: the expectations are evaluated on them, and fail when the
// mocked data says otherwise.
func TestMockedData(t *testing.T) {
	for _, tc := range []struct {
		name, allowed string
		pods          int
		failed        []string
	}{
		{name: "as-expected", allowed: "true", pods: 2},
		{name: "service-says-no", allowed: "false", pods: 2, failed: []string{"external/allowed", "external-cel/"}},
		{name: "too-many-pods", allowed: "true", pods: 3, failed: []string{"external/quota", "external-cel/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outcomes := runTestFiles(t, map[string]string{"policy.yaml": mockedPolicies, "pod.yaml": mockedPod, TestFileName: mockedTest(tc.allowed, tc.pods)})
			if len(outcomes) != 3 {
				t.Fatalf("got %d outcomes, want 3: %+v", len(outcomes), outcomes)
			}
			var failed []string
			for _, o := range outcomes {
				switch o.Status {
				case Passed:
				case Failed:
					failed = append(failed, o.Policy+"/"+o.Rule)
				default:
					t.Errorf("%s/%s: %s (%s): a mocked expectation is evaluated", o.Policy, o.Rule, o.Status, o.Reason)
				}
			}
			if strings.Join(failed, ",") != strings.Join(tc.failed, ",") {
				t.Fatalf("failed %v, want %v (%+v)", failed, tc.failed, outcomes)
			}
		})
	}
}
