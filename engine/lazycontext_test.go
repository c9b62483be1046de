package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
)

// countingLoader serves apiCall entries from a map of URL paths and counts
// the loads.
type countingLoader struct {
	answers map[string]any
	loads   []string
}

func (l *countingLoader) Load(_ context.Context, _ string, entry kyvernov1.ContextEntry, _ map[string]any) (any, error) {
	path := entry.APICall.URLPath
	l.loads = append(l.loads, path)
	if v, ok := l.answers[path]; ok {
		return v, nil
	}
	return nil, errors.New("failed to fetch data for APICall: failed to GET resource with raw url: " + path + ": not found")
}

// Context entries load when a variable first reads them, as Kyverno's do:
// preconditions that do not read one skip the rule without loading it; a
// failed load is the error of the variable that read it, in Kyverno's words,
// even in deny conditions (where unresolved variables are otherwise "");
// an entry read by several variables loads once.
func TestContextEntriesLoadWhenRead(t *testing.T) {
	const ctxRule = `    context:
    - name: ns
      apiCall: {urlPath: "/api/v1/namespaces/shop"}
    - name: missing
      apiCall: {urlPath: "/api/v1/namespaces/nothere"}
`
	for name, tc := range map[string]struct {
		rule      string
		wantLoads int
		want      engine.RuleResult
	}{
		"preconditions that skip load nothing": {
			rule: ctxRule + `    preconditions: {all: [{key: "{{ request.object.metadata.name }}", operator: Equals, value: other}]}
    validate: {message: m, deny: {conditions: {any: [{key: "{{ missing }}", operator: Equals, value: x}]}}}`,
			want: engine.RuleResult{Result: engine.Skip, Message: "preconditions not met"},
		},
		"a read entry loads once": {
			rule: ctxRule + `    validate:
      message: "team {{ ns.metadata.labels.team }}"
      deny: {conditions: {all: [{key: "{{ ns.metadata.labels.team }}", operator: Equals, value: a}, {key: "{{ ns.metadata.name }}", operator: Equals, value: shop}]}}`,
			wantLoads: 1,
			want:      engine.RuleResult{Result: engine.Fail, Message: "team a"},
		},
		"a failed load is the reading variable's error": {
			rule:      ctxRule + `    validate: {message: m, deny: {conditions: {any: [{key: "{{ request.object.metadata.name }}", operator: Equals, value: "{{ missing }}"}]}}}`,
			wantLoads: 1,
			want: engine.RuleResult{Result: engine.Error, Message: "failed to check deny conditions: failed to substitute variables in condition value: " +
				"failed to resolve missing at path : failed to fetch data for APICall: failed to GET resource with raw url: /api/v1/namespaces/nothere: not found"},
		},
		"an entry read inside a function call loads": {
			rule:      ctxRule + `    validate: {message: m, deny: {conditions: {any: [{key: "{{ length(ns.metadata.labels) }}", operator: Equals, value: 1}]}}}`,
			wantLoads: 1,
			want:      engine.RuleResult{Result: engine.Fail, Message: "m"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := compile(t, policy("", tc.rule))
			l := &countingLoader{answers: map[string]any{"/api/v1/namespaces/shop": map[string]any{
				"metadata": map[string]any{"name": "shop", "labels": map[string]any{"team": "a"}}}}}
			req := &engine.Request{Object: resource(t, podWithTwoContainers), Background: true, Loader: l}
			var got []engine.RuleResult
			for _, r := range p.Evaluate(context.Background(), req) {
				if r.Rule == "r" {
					got = append(got, r)
				}
			}
			if len(got) != 1 || got[0].Result != tc.want.Result || !strings.HasPrefix(got[0].Message, tc.want.Message) {
				t.Fatalf("got %+v, want %s %q", got, tc.want.Result, tc.want.Message)
			}
			if len(l.loads) != tc.wantLoads {
				t.Errorf("loads %v, want %d", l.loads, tc.wantLoads)
			}
		})
	}
}

// Offline, with nothing to load an entry from (no values, no context
// file), the entry is not loaded, as Kyverno's CLI loads no configMap or
// apiCall entry of its own (issue 40): the variable is undefined, so a
// default covers it and any other read is an unknown key, never a silent
// empty value.
func TestContextEntriesOfflineWithNothingToLoadThemFrom(t *testing.T) {
	rule := func(key string) string {
		return `    context:
    - name: allowed
      configMap: {name: allowed-registries, namespace: platform}
    validate:
      message: m
      deny: {conditions: {any: [{key: "` + key + `", operator: Equals, value: forbid}]}}`
	}
	tests := map[string]struct {
		key, message string
		result       wgv1alpha2.Result
	}{
		"read without a default: an unknown key": {
			key: "{{ allowed.data.names }}", result: engine.Error,
			message: `failed to check deny conditions: failed to substitute variables in condition key: failed to resolve allowed.data.names at path : JMESPath query failed: Unknown key "allowed" in path`,
		},
		"read with a default: the default": {
			key: `{{ allowed.data.\"some-key\" || \"\" }}`, result: engine.Pass, message: "validation rule 'r' passed.",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, policy("", rule(tc.key)))
			got := p.Evaluate(context.Background(), &engine.Request{Object: resource(t, podWithTwoContainers), Background: true})
			if len(got) != 1 || got[0].Result != tc.result || got[0].Message != tc.message {
				t.Fatalf("got %+v, want %s %q", got, tc.result, tc.message)
			}
		})
	}
}

// R47: a namespaced Policy's context entries read only its own namespace,
// and no policy calls the API with a method other than GET or POST: the
// rule is an error saying why, and the loader is never called.
func TestContextEntriesStayInThePolicysNamespace(t *testing.T) {
	namespaced := func(entry string) string {
		return `
apiVersion: kyverno.io/v1
kind: Policy
metadata: {name: p, namespace: team-a}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: leaked
      ` + entry + `
    validate:
      message: "leaked: {{ leaked }}"
      deny: {conditions: {any: [{key: "{{ leaked }}", operator: Equals, value: x}]}}`
	}
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: team-a}\nspec: {containers: [{name: c, image: nginx}]}\n"
	tests := map[string]struct {
		doc     string
		loads   int
		result  wgv1alpha2.Result
		message string
	}{
		"an apiCall into another namespace": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-b/configmaps/secret-ish", jmesPath: data.password}`), result: engine.Error,
			message: "apiCall.urlPath /api/v1/namespaces/team-b/configmaps/secret-ish: a namespaced policy of namespace team-a may read only paths under /api/v1/namespaces/team-a/",
		},
		"an apiCall that climbs out of its namespace": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-a/../team-b/configmaps/x"}`), result: engine.Error, message: "a dot segment (..) is not allowed (no call made)",
		},
		// Issue 53: the check read url.Parse(p).Path, which drops a
		// fragment, and client-go cleaned the ".." inside it.
		"an apiCall that climbs out through a fragment": {
			doc:    namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-a/configmaps/x#/../../../../../../api/v1/namespaces/team-b/configmaps/secret-cm"}`),
			result: engine.Error, message: "a fragment (#) is not allowed",
		},
		"an apiCall that climbs out through escaped dots": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-a/configmaps/%2e%2e/%2e%2e/team-b/configmaps/x"}`), result: engine.Error, message: "is not allowed in a path segment",
		},
		"an apiCall with an escaped slash": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-a%2F..%2Fteam-b/configmaps/x"}`), result: engine.Error, message: "is not allowed in a path segment",
		},
		"an apiCall with a backslash": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-a/configmaps/x\\..\\..\\team-b"}`), result: engine.Error, message: "is not allowed in a path segment",
		},
		"an apiCall with an empty segment": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-a//configmaps"}`), result: engine.Error, message: "an empty segment",
		},
		"an apiCall that watches": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/namespaces/team-a/configmaps?watch=true"}`), result: engine.Error, message: "watch is not allowed",
		},
		"an apiCall that watches by the old path": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/watch/namespaces/team-a/configmaps"}`), result: engine.Error, message: "a watch is not allowed",
		},
		"a POST that climbs out through a fragment": {
			doc:    namespaced(`apiCall: {method: POST, urlPath: "/api/v1/namespaces/team-a/events#/../../team-b/events", data: [{key: reason, value: x}]}`),
			result: engine.Error, message: "a fragment (#) is not allowed",
		},
		"an apiCall to a cluster-wide path": {
			doc: namespaced(`apiCall: {urlPath: "/api/v1/nodes"}`), result: engine.Error, message: "may read only paths under",
		},
		"a configMap of another namespace": {
			doc: namespaced(`configMap: {name: secret-ish, namespace: team-b}`), result: engine.Error,
			message: "configMap team-b/secret-ish: a namespaced policy of namespace team-a may read only its own namespace, not namespace team-b (no call made)",
		},
		"an apiCall of its own namespace is made": {
			doc: namespaced(`apiCall: {urlPath: "/apis/apps/v1/namespaces/team-a/deployments"}`), loads: 1, result: engine.Pass,
		},
		"a DELETE is never made, whatever the policy": {
			doc:    namespaced(`apiCall: {method: DELETE, urlPath: "/apis/wgpolicyk8s.io/v1alpha2/namespaces/team-a/policyreports/x"}`),
			result: engine.Error, message: `apiCall.method "DELETE" is not allowed: GET or POST only (no call made)`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var p kyvernov1.Policy
			if err := yaml.Unmarshal([]byte(tc.doc), &p); err != nil {
				t.Fatal(err)
			}
			c, err := engine.CompilePolicy(&p)
			if err != nil {
				t.Fatal(err)
			}
			l := &countingLoader{answers: map[string]any{"/apis/apps/v1/namespaces/team-a/deployments": "y"}}
			got := c.Evaluate(context.Background(), &engine.Request{Object: resource(t, pod), Background: true, Loader: l})
			if len(got) != 1 || got[0].Result != tc.result || !strings.Contains(got[0].Message, tc.message) {
				t.Fatalf("got %+v, want %s containing %q", got, tc.result, tc.message)
			}
			if len(l.loads) != tc.loads {
				t.Errorf("loads %v, want %d", l.loads, tc.loads)
			}
		})
	}
}

func TestInNamespacePath(t *testing.T) {
	for p, want := range map[string]bool{
		"/api/v1/namespaces/team-a":                                true,
		"/api/v1/namespaces/team-a/configmaps/x":                   true,
		"/api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb":   true,
		"/apis/apps/v1/namespaces/team-a/deployments":              true,
		"/api/v1/namespaces/team-b/configmaps/x":                   false,
		"/api/v1/namespaces/team-a/../team-b/configmaps/x":         false,
		"/api/v1/namespaces/team-a%2F..%2Fteam-b/configmaps/x":     false,
		"/api/v1/namespaces//team-a/configmaps":                    false,
		"/api/v1/nodes":                                            false,
		"/api/v1/namespaces":                                       false,
		"/apis/apps/v1/namespaces/team-a":                          false,
		"https://evil.example/api/v1/namespaces/team-a/configmaps": false,
		"api/v1/namespaces/team-a/configmaps":                      false,
		"/api/v1/namespaces/team-ab/configmaps":                    false,
		"/api/v1/namespaces/team-a/configmaps/x#/../../../team-b":  false,
		"/api/v1/namespaces/team-a/configmaps/%2e%2e/%2e%2e/x":     false,
		"/api/v1/namespaces/team-a/./configmaps":                   false,
		"/api/v1/namespaces/team-a/configmaps/":                    false,
		"/api/v1/namespaces/team-a\\..\\team-b":                    false,
		"/api/v1/namespaces/team-a?x=1#frag":                       false,
	} {
		if got := engine.InNamespacePath(p, "team-a"); got != want {
			t.Errorf("InNamespacePath(%q) = %v, want %v", p, got, want)
		}
	}
}
