package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

const goodRule = `
  rules:
  - name: r
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate: {message: m, pattern: {metadata: {labels: {team: "?*"}}}}`

func review(t *testing.T, kind, group, operation, object string) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(object))
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Group: group, Version: "v1", Kind: kind},
		Operation: admissionv1.Operation(operation), Object: runtime.RawExtension{Raw: raw},
	}
}

func TestKyvernoRefusal(t *testing.T) {
	tests := map[string]struct {
		kind, group, operation, object string
		want                           string // a substring; "" = not refused here
	}{
		"admission and background both off": {"ClusterPolicy", "kyverno.io", "CREATE",
			"spec:\n  admission: false\n  background: false" + goodRule, refusalNeverEvaluated},
		"admission off alone is fine": {"ClusterPolicy", "kyverno.io", "CREATE",
			"spec:\n  admission: false" + goodRule, ""},
		"a JMESPath that does not parse, in a deny condition": {"ClusterPolicy", "kyverno.io", "CREATE", `
spec:
  rules:
  - name: broken
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate: {message: m, deny: {conditions: {any: [{key: "{{ request.object.metadata.(( }}", operator: Equals, value: x}]}}}`,
			refusalInvalidVariables + "rule broken: variable {{ request.object.metadata.(( }}: invalid JMESPath"},
		"a JMESPath that does not parse, in a namespaced Policy's pattern": {"Policy", "kyverno.io", "UPDATE", `
metadata: {namespace: ns}
spec:
  rules:
  - name: broken
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate: {message: m, pattern: {metadata: {labels: {team: "{{ request.object.metadata.(( }}"}}}}`,
			refusalInvalidVariables},
		"a good policy goes to the bridge": {"ClusterPolicy", "kyverno.io", "CREATE", "spec:" + goodRule, ""},
		"a delete is not checked":          {"ClusterPolicy", "kyverno.io", "DELETE", "spec:\n  admission: false\n  background: false" + goodRule, ""},
		"a ValidatingPolicy that does not compile": {"ValidatingPolicy", "policies.kyverno.io", "CREATE", `
spec:
  validationActions: [Audit]
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]}
  validations: [{expression: "object.metadata.name.startsWith("}]`, "Syntax error"},
		"a ValidatingPolicy that compiles": {"ValidatingPolicy", "policies.kyverno.io", "CREATE", `
spec:
  validationActions: [Audit]
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]}
  validations: [{expression: "has(object.data)"}]`, ""},
		"another kind is not checked": {"ConfigMap", "", "CREATE", "metadata: {name: c}", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := kyvernoRefusal(review(t, tc.kind, tc.group, tc.operation, tc.object))
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("refusal %q, want one containing %q", got, tc.want)
			}
		})
	}
}

func TestPolicyWebhookAnswersOrHandsOn(t *testing.T) {
	var handedOn []string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		handedOn = append(handedOn, body.String())
		w.WriteHeader(http.StatusTeapot)
	})
	h := policyWebhook{next: next}
	post := func(req *admissionv1.AdmissionRequest) *httptest.ResponseRecorder {
		body, err := json.Marshal(&admissionv1.AdmissionReview{Request: req})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
		return rec
	}

	rec := post(review(t, "ClusterPolicy", "kyverno.io", "CREATE", "spec:\n  admission: false\n  background: false"+goodRule))
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || answer.Response == nil {
		t.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	if answer.Response.Allowed || answer.Response.UID != "u" || answer.Response.Result.Message != refusalNeverEvaluated {
		t.Errorf("answer %+v, want the request refused with %q", answer.Response, refusalNeverEvaluated)
	}
	if len(handedOn) != 0 {
		t.Errorf("a refused policy was handed on to the bridge too")
	}

	rec = post(review(t, "ClusterPolicy", "kyverno.io", "CREATE", "spec:"+goodRule))
	if rec.Code != http.StatusTeapot || len(handedOn) != 1 || !strings.Contains(handedOn[0], `"kind":"ClusterPolicy"`) {
		t.Errorf("a good policy must reach the bridge with its body whole: code %d, bridge saw %q", rec.Code, handedOn)
	}
}
