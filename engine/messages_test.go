package engine_test

import (
	"context"
	"testing"

	"sigs.k8s.io/yaml"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/engine"
)

// evaluateRule runs the rule r of a one-rule policy on a resource, with
// optional PolicyExceptions, and returns its results (none, or one).
func evaluateRule(t *testing.T, rule, obj string, exceptions ...string) []engine.RuleResult {
	t.Helper()
	p := compile(t, policy("", rule))
	req := &engine.Request{Object: resource(t, obj), Background: true}
	for _, doc := range exceptions {
		var pe kyvernov2.PolicyException
		if err := yaml.Unmarshal([]byte(doc), &pe); err != nil {
			t.Fatal(err)
		}
		x, err := engine.CompileException(&pe)
		if err != nil {
			t.Fatal(err)
		}
		req.Exceptions = append(req.Exceptions, x)
	}
	var own []engine.RuleResult
	for _, r := range p.Evaluate(context.Background(), req) {
		if r.Rule == "r" {
			own = append(own, r)
		}
	}
	return own
}

const podWithTwoContainers = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {team: a}}
spec:
  containers:
  - {name: app, image: "nginx:1.27"}
  - {name: sidecar, image: "ghcr.io/x/y:1"}
`

// Messages in the shapes Kyverno gives them, so that reports read the same.
func TestMessagesAreKyvernos(t *testing.T) {
	tests := map[string]struct {
		rule    string
		want    engine.RuleResult // Result and exact Message
		wantNil bool
	}{
		"a pattern failure adds no second period to a message that has one": {
			rule: `    validate: {message: "owner is required.", pattern: {metadata: {labels: {owner: "?*"}}}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation error: owner is required. rule r failed at path /metadata/labels/owner/"},
		},
		"a pattern failure ends a message without a period with one": {
			rule: `    validate: {message: "owner is required", pattern: {metadata: {labels: {owner: "?*"}}}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation error: owner is required. rule r failed at path /metadata/labels/owner/"},
		},
		"a pattern failure without a message names the rule and path only": {
			rule: `    validate: {pattern: {metadata: {labels: {owner: "?*"}}}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation error: rule r failed at path /metadata/labels/owner/"},
		},
		"an anyPattern pass names the pattern that passed": {
			rule: `    validate: {message: "m", anyPattern: [{metadata: {labels: {owner: "?*"}}}, {metadata: {labels: {team: "?*"}}}]}`,
			want: engine.RuleResult{Result: engine.Pass, Message: "validation rule 'r' anyPattern[1] passed."},
		},
		"an anyPattern failure lists every failing pattern after the message": {
			rule: `    validate: {message: "owner or cost centre.", anyPattern: [{metadata: {labels: {owner: "?*"}}}, {metadata: {labels: {cost: "?*"}}}]}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation error: owner or cost centre. rule r[0] failed at path /metadata/labels/owner/ rule r[1] failed at path /metadata/labels/cost/"},
		},
		"a foreach whose elements pass says rule passed": {
			rule: `    validate:
      message: "images need a registry"
      foreach:
      - list: request.object.spec.containers
        pattern: {image: "?*"}`,
			want: engine.RuleResult{Result: engine.Pass, Message: "rule passed"},
		},
		"a foreach pattern failure is prefixed with validation failure": {
			rule: `    validate:
      message: "images need a registry"
      foreach:
      - list: request.object.spec.containers
        pattern: {image: "*/*"}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation failure: validation error: images need a registry. rule r failed at path /image/"},
		},
		"a foreach deny failure is prefixed with validation failure": {
			rule: `    validate:
      message: "no nginx"
      foreach:
      - list: request.object.spec.containers
        deny: {conditions: {any: [{key: "{{ element.image }}", operator: Equals, value: "nginx*"}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation failure: no nginx"},
		},
		"a nested foreach failure is prefixed once per level": {
			rule: `    validate:
      message: "no nginx"
      foreach:
      - list: request.object.spec.containers
        foreach:
        - list: "[element.image]"
          deny: {conditions: {any: [{key: "{{ element }}", operator: Equals, value: "nginx*"}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation failure: validation failure: no nginx"},
		},
		"a foreach with elementScope true over strings is an error in Kyverno's words": {
			rule: `    validate:
      message: m
      foreach:
      - list: request.object.spec.containers[].image
        elementScope: true
        pattern: {name: "?*"}`,
			want: engine.RuleResult{Result: engine.Error, Message: "failed to process foreach: cannot use elementScope=true foreach rules for elements that are not maps, expected type=map got type=string"},
		},
		"a foreach over an absent list gives no result": {
			rule: `    validate:
      message: m
      foreach:
      - list: request.object.spec.volumes
        pattern: {name: "?*"}`,
			wantNil: true,
		},
		"a foreach over an empty list gives no result": {
			rule: `    validate:
      message: m
      foreach:
      - list: "[]"
        pattern: {name: "?*"}`,
			wantNil: true,
		},
		"a foreach whose every element is skipped by its preconditions gives no result": {
			rule: `    validate:
      message: m
      foreach:
      - list: request.object.spec.containers
        preconditions: {all: [{key: "{{ element.name }}", operator: Equals, value: none}]}
        pattern: {image: "*/*"}`,
			wantNil: true,
		},
		"an error on an element before the last is passed over": {
			rule: `    validate:
      message: m
      foreach:
      - list: request.object.spec.containers
        deny: {conditions: {any: [{key: "{{ element.name == 'app' && divide(` + "`1`, `0`" + `) || 'ok' }}", operator: Equals, value: "no"}]}}`,
			want: engine.RuleResult{Result: engine.Pass, Message: "rule passed"},
		},
		"an error on the last element decides": {
			rule: `    validate:
      message: m
      foreach:
      - list: request.object.spec.containers
        deny: {conditions: {any: [{key: "{{ element.name == 'sidecar' && divide(` + "`1`, `0`" + `) || 'ok' }}", operator: Equals, value: "no"}]}}`,
			want: engine.RuleResult{Result: engine.Error, Message: "validation failure: failed to check deny conditions: "},
		},
		"a deny failure adds the messages of the conditions that held": {
			rule: `    validate:
      message: "no {{ request.object.metadata.name }}"
      deny: {conditions: {any: [{key: "{{ request.object.metadata.name }}", operator: Equals, value: web, message: "name is {{ request.object.metadata.name }}"}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "no web; name is web"},
		},
		"a missing field in preconditions is an error in Kyverno's words": {
			rule: `    preconditions: {all: [{key: "{{ request.object.metadata.labels.app }}", operator: Equals, value: web}]}
    validate: {message: m, deny: {}}`,
			want: engine.RuleResult{Result: engine.Error, Message: `failed to evaluate preconditions: failed to substitute variables in condition key: failed to resolve request.object.metadata.labels.app at path : JMESPath query failed: Unknown key "app" in path`},
		},
		"a missing field with a default in preconditions is the default": {
			rule: `    preconditions: {all: [{key: "{{ request.object.metadata.labels.app || '' }}", operator: Equals, value: web}]}
    validate: {message: m, deny: {}}`,
			want: engine.RuleResult{Result: engine.Skip, Message: "preconditions not met"},
		},
		"a function given null in deny conditions is an error": {
			rule: `    validate:
      message: m
      deny: {conditions: {any: [{key: "{{ contains(request.object.metadata.annotations, 'x') }}", operator: Equals, value: true}]}}`,
			want: engine.RuleResult{Result: engine.Error, Message: "failed to check deny conditions: failed to substitute variables in condition key: failed to resolve contains(request.object.metadata.annotations, 'x') at path : JMESPath query failed: "},
		},
		"preconditions that fail to evaluate are an error in Kyverno's words": {
			rule: `    preconditions: {all: [{key: "{{ divide(` + "`1`, `0`" + `) }}", operator: Equals, value: 1}]}
    validate: {message: m, deny: {}}`,
			want: engine.RuleResult{Result: engine.Error, Message: "failed to evaluate preconditions: "},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := evaluateRule(t, tc.rule, podWithTwoContainers)
			if tc.wantNil {
				if len(got) != 0 {
					t.Fatalf("got %+v, want no result", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d results %+v, want 1", len(got), got)
			}
			r := got[0]
			exact := tc.want.Result != engine.Error
			if r.Result != tc.want.Result || (exact && r.Message != tc.want.Message) || (!exact && !hasPrefix(r.Message, tc.want.Message)) {
				t.Errorf("got %s %q\nwant %s %q", r.Result, r.Message, tc.want.Result, tc.want.Message)
			}
		})
	}
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// A skip caused by PolicyExceptions names them in the message as Kyverno
// keys them ("<namespace>/<name>") and lists their names only in the
// result's exceptions, which become the report's exceptions property.
func TestExceptionSkipNamesTheExceptions(t *testing.T) {
	exception := func(name string) string {
		return `
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: ` + name + `, namespace: shop}
spec:
  exceptions: [{policyName: p, ruleNames: [r]}]
  match: {any: [{resources: {kinds: [Pod]}}]}
`
	}
	const rule = `    validate: {message: "m", pattern: {metadata: {labels: {owner: "?*"}}}}`
	tests := map[string]struct {
		exceptions []string
		wantMsg    string
		wantNames  []string
	}{
		"one exception": {
			exceptions: []string{exception("mynewpolex")},
			wantMsg:    "rule is skipped due to policy exceptionsshop/mynewpolex",
			wantNames:  []string{"mynewpolex"},
		},
		"two exceptions": {
			exceptions: []string{exception("init1"), exception("init2")},
			wantMsg:    "rule is skipped due to policy exceptionsshop/init1, shop/init2",
			wantNames:  []string{"init1", "init2"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := evaluateRule(t, rule, podWithTwoContainers, tc.exceptions...)
			if len(got) != 1 || got[0].Result != engine.Skip {
				t.Fatalf("got %+v, want one skip", got)
			}
			if got[0].Message != tc.wantMsg {
				t.Errorf("message %q, want %q", got[0].Message, tc.wantMsg)
			}
			if len(got[0].Exceptions) != len(tc.wantNames) {
				t.Fatalf("exceptions %v, want %v", got[0].Exceptions, tc.wantNames)
			}
			for i := range tc.wantNames {
				if got[0].Exceptions[i] != tc.wantNames[i] {
					t.Errorf("exceptions %v, want %v", got[0].Exceptions, tc.wantNames)
				}
			}
		})
	}
}

// reportProperties values are reported with their variables resolved
// against the rule's data.
func TestReportPropertiesAreSubstituted(t *testing.T) {
	const rule = `    reportProperties:
      operation: "{{ request.operation }}"
      pod: "{{ request.object.metadata.name }} in {{ request.object.metadata.namespace }}"
      tier: "{{ tier }}"
      plain: fixed
      missing: "{{ request.object.metadata.nothere }}"
    context:
    - name: tier
      variable: {value: gold}
    validate: {message: "m", pattern: {metadata: {labels: {team: "?*"}}}}`
	tests := map[string]struct {
		operation string
		want      map[string]string
	}{
		"a background scan evaluates as CREATE": {
			want: map[string]string{"operation": "CREATE", "pod": "web in shop", "tier": "gold", "plain": "fixed", "missing": "{{ request.object.metadata.nothere }}"},
		},
		"an admission UPDATE": {
			operation: engine.OpUpdate,
			want:      map[string]string{"operation": "UPDATE", "pod": "web in shop", "tier": "gold", "plain": "fixed", "missing": "{{ request.object.metadata.nothere }}"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, policy("", rule))
			obj := resource(t, podWithTwoContainers)
			req := &engine.Request{Object: obj, Operation: tc.operation, Background: tc.operation == ""}
			if tc.operation == engine.OpUpdate {
				req.OldObject = obj
			}
			got := p.Evaluate(context.Background(), req)
			if len(got) != 1 {
				t.Fatalf("got %+v, want one result", got)
			}
			for k, v := range tc.want {
				if got[0].Properties[k] != v {
					t.Errorf("property %s = %q, want %q", k, got[0].Properties[k], v)
				}
			}
			if p.Rules[0].Raw.ReportProperties["operation"] != "{{ request.operation }}" {
				t.Error("the policy's reportProperties were modified")
			}
		})
	}
}
