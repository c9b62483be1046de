package engine_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/engine"
)

func compile(t *testing.T, doc string) *engine.Policy {
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

func resource(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

const labelledPod = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {team: a}}
spec:
  containers:
  - {name: app, image: "nginx:1.27"}
  - {name: istio-proxy, image: "istio/proxyv2:1.22", securityContext: {runAsUser: 1337}}
`

func policy(annotations, rule string) string {
	return `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p, annotations: {` + annotations + `}}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
` + rule
}

func TestRuleResults(t *testing.T) {
	tests := map[string]struct {
		annotations string
		rule        string
		exceptions  []string
		want        engine.RuleResult // Policy, Rule, Result, and a message prefix
		wantNone    bool
	}{
		"R21 a satisfied pattern passes with the documented message": {
			rule: `    validate: {message: "team is required", pattern: {metadata: {labels: {team: "?*"}}}}`,
			want: engine.RuleResult{Result: engine.Pass, Message: "validation rule 'r' passed."},
		},
		"R22 and R17 a violated pattern fails with message and path": {
			rule: `    validate: {message: "owner is required", pattern: {metadata: {labels: {owner: "?*"}}}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation error: owner is required. rule r failed at path /metadata/labels/owner/"},
		},
		"R24 an unscored policy warns instead of failing": {
			annotations: `policies.kyverno.io/scored: "false"`,
			rule:        `    validate: {message: "m", pattern: {metadata: {labels: {owner: "?*"}}}}`,
			want:        engine.RuleResult{Result: engine.Warn},
		},
		"a pattern operator without operand fails wherever the field is, as Kyverno's": {
			rule: `    validate: {message: "team", pattern: {metadata: {labels: {team: ">="}}}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "validation error: team. rule r failed at path /metadata/labels/team/"},
		},
		"a precondition reading a variable nothing defines is an error, as Kyverno's": {
			rule: `    preconditions: {all: [{key: "{{ tier == 'gold' }}", operator: Equals, value: false}]}
    validate: {message: "m", pattern: {metadata: {name: "?*"}}}`,
			want: engine.RuleResult{Result: engine.Error, Message: "failed to evaluate preconditions: failed to substitute variables in condition key: " +
				"failed to resolve tier == 'gold' at path : JMESPath query failed: Unknown key \"tier\" in path"},
		},
		"a precondition reading a context variable in a comparison is evaluated": {
			rule: `    context: [{name: tier, variable: {value: gold}}]
    preconditions: {all: [{key: "{{ tier == 'gold' }}", operator: Equals, value: false}]}
    validate: {message: "m", pattern: {metadata: {name: "?*"}}}`,
			want: engine.RuleResult{Result: engine.Skip, Message: "preconditions not met"},
		},
		"R23 unmet preconditions skip": {
			rule: `    preconditions: {all: [{key: "{{ request.object.metadata.namespace }}", operator: Equals, value: prod}]}
    validate: {message: "m", deny: {}}`,
			want: engine.RuleResult{Result: engine.Skip, Message: "preconditions not met"},
		},
		"R23 a conditional anchor that does not hold beside passing siblings is a pass": {
			rule: `    validate:
      message: m
      pattern:
        spec:
          containers:
          - (name): "istio-*"
            securityContext: {runAsUser: 1337}`,
			want: engine.RuleResult{Result: engine.Pass},
		},
		"R23 a matching PolicyException skips and names itself": {
			rule:       `    validate: {message: "m", pattern: {metadata: {labels: {owner: "?*"}}}}`,
			exceptions: []string{"shop/allow-web"},
			want:       engine.RuleResult{Result: engine.Skip, Message: "rule is skipped due to policy exceptionsshop/allow-web"},
		},
		"R25 a variable that cannot be resolved is an error": {
			rule: `    validate: {message: "m", pattern: {metadata: {labels: {team: "{{ request.object.metadata.missing.field }}"}}}}`,
			want: engine.RuleResult{Result: engine.Error},
		},
		"a variable whose JMESPath does not parse makes the rule an error at compile time": {
			rule: `    validate: {message: "m", deny: {conditions: {any: [{key: "{{ request.object.metadata.(( }}", operator: Equals, value: x}]}}}`,
			want: engine.RuleResult{Result: engine.Error, Message: "rule r: variable {{ request.object.metadata.(( }}"},
		},
		"deny conditions that hold fail with the rule message": {
			rule: `    validate: {message: "no web here", deny: {conditions: {any: [{key: "{{ request.object.metadata.name }}", operator: Equals, value: web}]}}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "no web here"},
		},
		"foreach fails on the element that violates": {
			rule: `    validate:
      message: "images need a registry"
      foreach:
      - list: request.object.spec.containers
        pattern: {image: "*/*"}`,
			want: engine.RuleResult{Result: engine.Fail},
		},
		"an unsupported construct is an error that names it": {
			rule: `    validate: {manifests: {attestors: []}}`,
			want: engine.RuleResult{Result: engine.Error, Message: "rule r: validate.manifests is not supported"},
		},
		"R35 validate.cel that holds passes, in Kubernetes' words": {
			rule: `    validate: {cel: {expressions: [{expression: "object.metadata.name == 'web'"}]}}`,
			want: engine.RuleResult{Result: engine.Pass, Message: "Validation rule 'r' passed."},
		},
		"R35 validate.cel that is false fails with its message, trimmed": {
			rule: `    validate: {cel: {expressions: [{expression: "true"}, {expression: "object.metadata.name == 'x'", message: " name must be x "}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "name must be x"},
		},
		"R35 validate.cel without a message fails naming the expression": {
			rule: `    validate: {cel: {expressions: [{expression: "object.metadata.name == 'x'"}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "failed expression: object.metadata.name == 'x'"},
		},
		"R35 validate.cel falls back to the rule's message": {
			rule: `    validate: {message: "from the rule", cel: {expressions: [{expression: "false", messageExpression: "''"}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "from the rule"},
		},
		"R35 validate.cel whose expression errs fails with the error, as Kyverno does": {
			rule: `    validate: {cel: {expressions: [{expression: "object.spec.nothere == 1"}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "expression 'object.spec.nothere == 1' resulted in error: no such key: nothere"},
		},
		"R35 validate.cel preconditions not met skip the rule": {
			rule: `    celPreconditions: [{name: c, expression: "object.metadata.name == 'other'"}]
    validate: {cel: {expressions: [{expression: "false"}]}}`,
			want: engine.RuleResult{Result: engine.Skip, Message: "cel preconditions not met"},
		},
		"R38 validate.cel that does not compile fails with the compiler's message": {
			rule: `    validate: {cel: {expressions: [{expression: "'x'"}]}}`,
			want: engine.RuleResult{Result: engine.Fail, Message: "compilation error: must evaluate to bool but got string"},
		},
		"R05 a rule whose match does not select the resource yields nothing": {
			rule: `    exclude: {any: [{resources: {namespaces: [shop]}}]}
    validate: {message: "m", pattern: {metadata: {labels: {owner: "?*"}}}}`,
			wantNone: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, policy(tc.annotations, tc.rule))
			req := &engine.Request{Object: resource(t, labelledPod), Background: true}
			for _, ex := range tc.exceptions {
				ns, n, _ := strings.Cut(ex, "/")
				pe := &kyvernov2.PolicyException{Spec: kyvernov2.PolicyExceptionSpec{
					Match:      kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{{Resources: kyvernov1.ResourceDescription{Kinds: []string{"Pod"}, Names: []string{"web"}}}}},
					Exceptions: []kyvernov2.Exception{{PolicyName: "p", RuleNames: []string{"r"}}},
				}}
				pe.Name, pe.Namespace = n, ns
				c, err := engine.CompileException(pe)
				if err != nil {
					t.Fatal(err)
				}
				req.Exceptions = append(req.Exceptions, c)
			}
			got := p.Evaluate(context.Background(), req)
			var own []engine.RuleResult
			for _, r := range got {
				if r.Rule == "r" { // autogen rules do not apply to a Pod
					own = append(own, r)
				}
			}
			if tc.wantNone {
				if len(own) != 0 {
					t.Fatalf("got %+v, want no result", own)
				}
				return
			}
			if len(own) != 1 {
				t.Fatalf("got %d results %+v, want 1", len(own), own)
			}
			r := own[0]
			if r.Policy != "p" || r.Result != tc.want.Result || !strings.HasPrefix(r.Message, tc.want.Message) {
				t.Errorf("got %s %q, want %s %q...", r.Result, r.Message, tc.want.Result, tc.want.Message)
			}
		})
	}
}

func TestValidateBackgroundRejectsAdmissionOnlyData(t *testing.T) {
	tests := map[string]struct {
		rule    string
		wantErr string
	}{
		"request.userInfo in a message": {
			rule:    `    validate: {message: "{{ request.userInfo.username }}", deny: {}}`,
			wantErr: "request.userInfo",
		},
		"serviceAccountName as a variable": {
			rule:    `    validate: {message: "m", deny: {conditions: {any: [{key: "{{ serviceAccountName }}", operator: Equals, value: x}]}}}`,
			wantErr: "serviceAccountName",
		},
		"a spec field named serviceAccountName is fine": {
			rule: `    validate: {message: "{{ request.object.spec.serviceAccountName }}", deny: {}}`,
		},
		"request.object is fine": {
			rule: `    validate: {message: "{{ request.object.metadata.name }}", deny: {}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var p kyvernov1.ClusterPolicy
			if err := yaml.Unmarshal([]byte(policy("", tc.rule)), &p); err != nil {
				t.Fatal(err)
			}
			err := engine.ValidateBackground(&p.Spec)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
}
