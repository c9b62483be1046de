package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
)

// policyWith is a valid ClusterPolicy whose spec's top-level fields and
// first rule's validate block are replaced by the arguments.
func policyWith(spec, rule, validate string) string {
	if rule == "" {
		rule = "match: {any: [{resources: {kinds: [Pod]}}]}"
	}
	if validate == "" {
		validate = `{message: m, pattern: {metadata: {labels: {team: "?*"}}}}`
	}
	return "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n" +
		"  background: true\n" + spec +
		"  rules:\n  - name: r\n    " + rule + "\n    validate: " + validate + "\n"
}

// refuse runs every check a policy goes through before use (the object's
// schema, as the CLI does; Malformed, as the CLI, the scanner and the
// webhook do) and returns the reasons.
func refuse(t *testing.T, doc string) error {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	if err := engine.CheckObject(obj); err != nil {
		return err
	}
	return engine.Malformed(compile(t, doc))
}

func TestPoliciesAreRefusedWithTheFieldPathAtFault(t *testing.T) {
	cases := map[string]struct {
		doc  string
		want []string // each must be in the error
	}{
		"an unknown spec field": {
			doc:  policyWith("  validationFailureActoin: Enforce\n", "", ""),
			want: []string{"spec.validationFailureActoin", "unknown field"},
		},
		"an unknown rule field": {
			doc:  policyWith("", "match: {any: [{resources: {kinds: [Pod]}}]}\n    mtach: {}", ""),
			want: []string{"spec.rules[0].mtach", "unknown field"},
		},
		"validationFailureAction Block": {
			doc:  policyWith("  validationFailureAction: Block\n", "", ""),
			want: []string{"spec.validationFailureAction", `"Block"`},
		},
		"failurePolicy Sometimes": {
			doc:  policyWith("  failurePolicy: Sometimes\n", "", ""),
			want: []string{"spec.failurePolicy", `"Sometimes"`},
		},
		"validate.failureAction Deny": {
			doc:  policyWith("", "", `{failureAction: Deny, pattern: {metadata: {name: "?*"}}}`),
			want: []string{"spec.rules[0].validate.failureAction", `"Deny"`},
		},
		"a podSecurity level that does not exist": {
			doc:  policyWith("", "", `{podSecurity: {level: strict, version: latest}}`),
			want: []string{"spec.rules[0].validate.podSecurity.level", `"strict"`},
		},
		"a podSecurity version that is not one": {
			doc:  policyWith("", "", `{podSecurity: {level: baseline, version: "1.29"}}`),
			want: []string{"spec.rules[0].validate.podSecurity.version", `"1.29"`},
		},
		"a rule without match": {
			doc:  policyWith("", "exclude: {any: [{resources: {kinds: [Secret]}}]}", ""),
			want: []string{"spec.rules[0].match", "Required value"},
		},
		"a pattern key =(name taken as a literal key": {
			doc:  policyWith("", "", `{pattern: {metadata: {"=(name": "?*"}}}`),
			want: []string{"spec.rules[0].validate.pattern.metadata.=(name", "malformed anchor"},
		},
		"an anchor with an empty key": {
			doc:  policyWith("", "", `{anyPattern: [{metadata: {"X()": x}}]}`),
			want: []string{"spec.rules[0].validate.anyPattern[0].metadata.X()", "malformed anchor"},
		},
		"an anchor with an unknown modifier": {
			doc:  policyWith("", "", `{pattern: {spec: {"!(hostNetwork)": false}}}`),
			want: []string{"spec.rules[0].validate.pattern.spec.!(hostNetwork)", "unknown modifier"},
		},
		"a malformed anchor in a foreach pattern": {
			doc:  policyWith("", "", `{foreach: [{list: "request.object.spec.containers", pattern: {"(image": x}}]}`),
			want: []string{"spec.rules[0].validate.foreach[0].pattern.(image", "malformed anchor"},
		},
		"an unknown deny operator": {
			doc:  policyWith("", "", `{deny: {conditions: {any: [{key: a, operator: Matches, value: b}]}}}`),
			want: []string{"spec.rules[0].validate.deny.conditions.any[0].operator", `"Matches"`},
		},
		"an unknown precondition operator in a plain list": {
			doc:  policyWith("", "match: {any: [{resources: {kinds: [Pod]}}]}\n    preconditions: [{key: a, operator: Is, value: b}]", ""),
			want: []string{"spec.rules[0].preconditions[0].operator", `"Is"`},
		},
		"an unknown operator in a nested foreach": {
			doc: policyWith("", "", `{foreach: [{list: "request.object.spec.containers", foreach: [{list: "element.ports", `+
				`deny: {conditions: {all: [{key: a, operator: Bigger, value: b}]}}}]}]}`),
			want: []string{"spec.rules[0].validate.foreach[0].foreach[0].deny.conditions.all[0].operator", `"Bigger"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := refuse(t, tc.doc)
			if err == nil {
				t.Fatal("accepted, want refused")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestPoliciesKyvernoAcceptsAreAccepted(t *testing.T) {
	cases := map[string]string{
		"the lowercase legacy validationFailureAction": policyWith("  validationFailureAction: enforce\n  failurePolicy: Ignore\n", "", ""),
		"Audit at the rule":                            policyWith("", "", `{failureAction: Audit, pattern: {metadata: {name: "?*"}}}`),
		"every anchor":                                 policyWith("", "", `{pattern: {metadata: {"=(labels)": {"(app)": "x", "X(bad)": "null", "^(list)": [{a: b}], "<(team)": "?*", "+(add)": "y"}}}}`),
		"operators in any case":                        policyWith("", "", `{deny: {conditions: {all: [{key: a, operator: equals, value: b}, {key: "1h", operator: DurationGreaterThanOrEquals, value: "30m"}, {key: [a], operator: AnyNotIn, value: [b]}]}}}`),
		"a legacy match.resources":                     policyWith("", "match: {resources: {kinds: [Pod]}}", ""),
		"a podSecurity version":                        policyWith("", "", `{podSecurity: {level: restricted, version: v1.29}}`),
		"a key with parentheses inside":                policyWith("", "", `{pattern: {metadata: {annotations: {"a(b)c": "?*"}}}}`),
		"a pattern operator without operand":           policyWith("", "", `{message: m, pattern: {metadata: {labels: {team: ">="}}}}`),
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := refuse(t, doc); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}

// The shipped samples are what a newcomer applies first: none may be refused.
func TestShippedSamplePoliciesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "policies", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample policies: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal(data, &obj); err != nil {
				t.Fatal(err)
			}
			if err := engine.CheckObject(obj); err != nil {
				t.Errorf("schema: %v", err)
			}
			var p *engine.Policy
			if obj["kind"] == "Policy" {
				var pol kyvernov1.Policy
				if err := yaml.Unmarshal(data, &pol); err != nil {
					t.Fatal(err)
				}
				p, err = engine.CompilePolicy(&pol)
			} else {
				var cp kyvernov1.ClusterPolicy
				if err := yaml.Unmarshal(data, &cp); err != nil {
					t.Fatal(err)
				}
				p, err = engine.CompileClusterPolicy(&cp)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := engine.Malformed(p); err != nil {
				t.Errorf("malformed: %v", err)
			}
		})
	}
}
