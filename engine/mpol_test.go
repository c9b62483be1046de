package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
)

func mutatingPolicy(t testing.TB, doc string) *engine.Policy {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	mp, err := policiesv1.MutatingFromObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.CompileMutatingPolicy(mp)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const mpolHeader = `
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: add-team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
`

func pod(t testing.TB, doc string) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

const (
	podWithTeam = `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default, labels: {team: a}}
spec:
  containers:
  - name: c
    image: nginx
    resources: {}
    ports: [{containerPort: 80, protocol: TCP}]
`
	podWithoutTeam = `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default, labels: {app: x}}
spec:
  containers:
  - {name: c, image: nginx}
`
)

// TestMutatingPolicyBackground: a pass when applying the mutations leaves
// the resource as it is, a fail "mutation is not applied" when they would
// change it (R44), with either patch type; skip when the match conditions
// are not met; error naming the mutation that cannot be applied.
func TestMutatingPolicyBackground(t *testing.T) {
	applyCfg := mpolHeader + `
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"team": "a"}}}
`
	jsonPatch := mpolHeader + `
  variables:
  - {name: team, expression: '"a"'}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/metadata/labels/team", value: variables.team}]
`
	conditioned := applyCfg + `
  matchConditions:
  - {name: only-web, expression: 'has(object.metadata.labels) && object.metadata.labels.?app.orValue("") == "web"'}
`
	broken := mpolHeader + `
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "replace", path: "/spec/nothing/here", value: "x"}]
`
	cases := []struct {
		name, policy, pod string
		want              engine.RuleResult
	}{
		{"apply configuration, applied", applyCfg, podWithTeam, engine.RuleResult{Result: engine.Pass, Message: "success"}},
		{"apply configuration, not applied", applyCfg, podWithoutTeam, engine.RuleResult{Result: engine.Fail, Message: "mutation is not applied"}},
		{"json patch, applied", jsonPatch, podWithTeam, engine.RuleResult{Result: engine.Pass, Message: "success"}},
		{"json patch, not applied", jsonPatch, podWithoutTeam, engine.RuleResult{Result: engine.Fail, Message: "mutation is not applied"}},
		{"conditions not met", conditioned, podWithoutTeam, engine.RuleResult{Result: engine.Skip, Message: "skip"}},
		{"mutation fails", broken, podWithTeam, engine.RuleResult{Result: engine.Error, Message: "mutation 0: JSON Patch"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mutatingPolicy(t, c.policy)
			got := p.Evaluate(context.Background(), &engine.Request{Object: pod(t, c.pod), Background: true})
			if len(got) != 1 {
				t.Fatalf("got %d results %+v, want 1", len(got), got)
			}
			r := got[0]
			if r.Result != c.want.Result || !strings.HasPrefix(r.Message, c.want.Message) || r.Source != "KyvernoMutatingPolicy" || r.Policy != "add-team" || r.Rule != "" {
				t.Errorf("got %+v, want %s %q from KyvernoMutatingPolicy add-team", r, c.want.Result, c.want.Message)
			}
		})
	}
}

func TestMutatingPolicyLeavesOtherKindsAndAdmission(t *testing.T) {
	p := mutatingPolicy(t, mpolHeader+`
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"team": "a"}}}'}
`)
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "default"}}
	if got := p.Evaluate(context.Background(), &engine.Request{Object: cm, Background: true}); len(got) != 0 {
		t.Errorf("a ConfigMap got %+v", got)
	}
	if p.AdmissionEnabled() || !p.BackgroundEnabled() || !p.CEL() || !p.Mutating() {
		t.Errorf("admission %v background %v CEL %v mutating %v, want false true true true", p.AdmissionEnabled(), p.BackgroundEnabled(), p.CEL(), p.Mutating())
	}
}

func TestMutatingPolicyRefusedNamesTheExpression(t *testing.T) {
	var obj map[string]any
	_ = yaml.Unmarshal([]byte(mpolHeader+`
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: nope}'}
`), &obj)
	mp, _ := policiesv1.MutatingFromObject(obj)
	_, err := engine.CompileMutatingPolicy(mp)
	if err == nil || !strings.Contains(err.Error(), "spec.mutations[0]") || !strings.Contains(err.Error(), "MutatingPolicy add-team") {
		t.Errorf("got %v, want an error naming MutatingPolicy add-team spec.mutations[0]", err)
	}
}

// BenchmarkMutatingPolicy is the background evaluation of a MutatingPolicy
// on a Pod: an ApplyConfiguration (through the Pod's schema) and a
// JSONPatch.
func BenchmarkMutatingPolicy(b *testing.B) {
	for _, c := range []struct{ name, policy string }{
		{"ApplyConfiguration", mpolHeader + `
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"team": "a"}}}'}
`},
		{"JSONPatch", mpolHeader + `
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/labels/team", value: "a"}]'}
`},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := mutatingPolicy(b, c.policy)
			obj := pod(b, podWithTeam)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if r := p.Evaluate(ctx, &engine.Request{Object: obj, Background: true}); len(r) != 1 || r[0].Result != engine.Pass {
					b.Fatalf("got %+v", r)
				}
			}
		})
	}
}

// A MutatingPolicy may call Kyverno's CEL functions that read nothing but
// their arguments; one that reads the cluster is refused, naming it.
func TestMutatingPolicyKyvernoFunctions(t *testing.T) {
	p := mutatingPolicy(t, mpolHeader+`
  variables:
  - {name: registry, expression: 'image(object.spec.containers[0].image).registry()'}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{annotations: {"registry": variables.registry, "digest": sha256("x")}}}'
`)
	got := p.Evaluate(context.Background(), &engine.Request{Object: pod(t, podWithTeam), Background: true})
	if len(got) != 1 || got[0].Result != engine.Fail || got[0].Message != "mutation is not applied" {
		t.Errorf("got %+v, want fail: the annotations are not there", got)
	}
	var obj map[string]any
	_ = yaml.Unmarshal([]byte(mpolHeader+`
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: resource.Get("v1", "configmaps", "default", "x").data}}'}
`), &obj)
	mp, _ := policiesv1.MutatingFromObject(obj)
	if _, err := engine.CompileMutatingPolicy(mp); err == nil || !strings.Contains(err.Error(), "spec.mutations[0]") || !strings.Contains(err.Error(), "resource") {
		t.Errorf("got %v, want the call to resource.Get refused", err)
	}
}

// FuzzMutatingPolicy applies MutatingPolicies (an ApplyConfiguration and a
// JSONPatch, through Kubernetes' patchers) to arbitrary objects: it must
// never panic, and it gives one result or none.
func FuzzMutatingPolicy(f *testing.F) {
	f.Add([]byte(podWithTeam))
	f.Add([]byte(podWithoutTeam))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","labels":"not a map"},"spec":{"containers":7}}`))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","namespace":"a"},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"lots"}}}]}}`))
	policies := []*engine.Policy{
		mutatingPolicy(f, mpolHeader+`
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"team": "a"}}}'}
`),
		mutatingPolicy(f, mpolHeader+`
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/labels/team", value: "a"}]'}
`),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 16<<10 {
			t.Skip()
		}
		var obj map[string]any
		if err := yaml.Unmarshal(data, &obj); err != nil || obj == nil {
			t.Skip()
		}
		for _, p := range policies {
			if got := p.Evaluate(context.Background(), &engine.Request{Object: obj, Background: true}); len(got) > 1 {
				t.Errorf("%d results, want at most 1", len(got))
			}
			p.Mutate(context.Background(), &engine.Request{Object: obj})
		}
	})
}

type noParams struct{}

func (noParams) Params(context.Context, schema.GroupVersionKind, string, string, *metav1.LabelSelector) ([]map[string]any, error) {
	return nil, nil
}

// A MutatingAdmissionPolicy without bindings is evaluated on its own
// constraints; one whose binding finds no params fails (Deny) or passes
// (Allow), as Kyverno's reports controller reports it.
func TestMutatingAdmissionPolicyBindings(t *testing.T) {
	var p admissionregistrationv1beta1.MutatingAdmissionPolicy
	if err := yaml.Unmarshal([]byte(`
metadata: {name: add-team}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"team": "a"}}}'}
`), &p); err != nil {
		t.Fatal(err)
	}
	deny, allow := admissionregistrationv1beta1.DenyAction, admissionregistrationv1beta1.AllowAction
	binding := func(action *admissionregistrationv1beta1.ParameterNotFoundActionType) *admissionregistrationv1beta1.MutatingAdmissionPolicyBinding {
		return &admissionregistrationv1beta1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1beta1.MutatingAdmissionPolicyBindingSpec{PolicyName: "add-team",
				ParamRef: &admissionregistrationv1beta1.ParamRef{Name: "missing", ParameterNotFoundAction: action}},
		}
	}
	for _, c := range []struct {
		name     string
		bindings []*admissionregistrationv1beta1.MutatingAdmissionPolicyBinding
		want     engine.RuleResult
	}{
		{"no binding", nil, engine.RuleResult{Result: engine.Pass, Message: "mutation is successfully applied"}},
		{"params missing, Deny", []*admissionregistrationv1beta1.MutatingAdmissionPolicyBinding{binding(&deny)}, engine.RuleResult{Result: engine.Fail, Message: "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"}},
		{"params missing, Allow", []*admissionregistrationv1beta1.MutatingAdmissionPolicyBinding{binding(&allow)}, engine.RuleResult{Result: engine.Pass, Message: "mutation is successfully applied"}},
	} {
		compiled, err := engine.CompileMutatingAdmissionPolicy(&p, c.bindings)
		if err != nil {
			t.Fatal(err)
		}
		got := compiled.Evaluate(context.Background(), &engine.Request{Object: pod(t, podWithTeam), Background: true, Params: noParams{}})
		if len(got) != 1 || got[0].Result != c.want.Result || got[0].Message != c.want.Message || got[0].Rule != "add-team" || got[0].Source != "MutatingAdmissionPolicy" {
			t.Errorf("%s: got %+v, want %s %q", c.name, got, c.want.Result, c.want.Message)
		}
	}
}

// offlineData serves resource.Get/List from a fixed set of objects.
type offlineData []map[string]any

func (d offlineData) GetResource(_ context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	for _, o := range d {
		md := o["metadata"].(map[string]any)
		if o["apiVersion"] == apiVersion && strings.ToLower(o["kind"].(string))+"s" == resource && md["namespace"] == namespace && md["name"] == name {
			return o, nil
		}
	}
	return nil, fmt.Errorf("%s %q not found", resource, name)
}

func (d offlineData) ListResources(_ context.Context, apiVersion, resource, namespace string) (map[string]any, error) {
	items := []any{}
	for _, o := range d {
		md := o["metadata"].(map[string]any)
		if o["apiVersion"] == apiVersion && strings.ToLower(o["kind"].(string))+"s" == resource && md["namespace"] == namespace {
			items = append(items, o)
		}
	}
	return map[string]any{"items": items}, nil
}

const mpolExistingHeader = `
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: label-targets}
spec:
  evaluation: {mutateExisting: {enabled: true}}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"touched": "yes"}}}'
`

// TestMutatingPolicyMutatesExistingTargets: a mutateExisting
// MutatingPolicy mutates the targets its targetMatchConstraints choose (by
// expression, or by resource rules whatever the operation), not its
// trigger, and skips those its targetMatchConditions leave out.
func TestMutatingPolicyMutatesExistingTargets(t *testing.T) {
	trigger := pod(t, `{apiVersion: v1, kind: Secret, metadata: {name: s, namespace: a}}`)
	targets := []map[string]any{
		pod(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: one, namespace: a}}`),
		pod(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: two, namespace: a, labels: {skip: "yes"}}}`),
		pod(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: one, namespace: b}}`),
	}
	labelOf := func(obj map[string]any) any {
		md, _ := obj["metadata"].(map[string]any)
		l, _ := md["labels"].(map[string]any)
		return l["touched"]
	}
	ctx := context.Background()

	byExpression := mutatingPolicy(t, mpolExistingHeader+`
  targetMatchConstraints:
    expression: 'resource.List("v1", "configmaps", object.metadata.namespace)'
  targetMatchConditions:
  - {name: not-skipped, expression: '!has(object.metadata.labels) || !("skip" in object.metadata.labels)'}
`)
	if !byExpression.MutatesExistingTargets() {
		t.Fatal("a MutatingPolicy with mutateExisting enabled does not say it mutates existing resources")
	}
	got := byExpression.MutateTargets(ctx, &engine.Request{Object: trigger, Data: offlineData(targets)}, targets)
	if len(got) != 2 {
		t.Fatalf("got %d target results, want the two ConfigMaps of namespace a: %+v", len(got), got)
	}
	if got[0].Result != engine.Pass || labelOf(got[0].Target) != "yes" {
		t.Fatalf("a/one: %s %q, label %v", got[0].Result, got[0].Message, labelOf(got[0].Target))
	}
	if got[1].Result != engine.Skip || labelOf(got[1].Target) != nil {
		t.Fatalf("a/two (its target conditions false): %s %q", got[1].Result, got[1].Message)
	}

	// An expression that cannot be evaluated is one error, no target.
	missing := mutatingPolicy(t, mpolExistingHeader+`
  targetMatchConstraints:
    expression: 'resource.Get("v1", "configmaps", object.metadata.namespace, "absent")'
`)
	got = missing.MutateTargets(ctx, &engine.Request{Object: trigger, Data: offlineData(targets)}, targets)
	if len(got) != 1 || got[0].Result != engine.Error || got[0].Target != nil || !strings.Contains(got[0].Message, "targetMatchConstraints.expression") {
		t.Fatalf("an expression reading nothing: %+v", got)
	}

	// Without an expression: the target rules choose, whatever the operation.
	byRules := mutatingPolicy(t, mpolExistingHeader+`
  targetMatchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [configmaps]}
    objectSelector: {matchExpressions: [{key: skip, operator: DoesNotExist}]}
`)
	got = byRules.MutateTargets(ctx, &engine.Request{Object: trigger}, targets)
	if len(got) != 2 || got[0].Result != engine.Pass || got[1].Result != engine.Pass {
		t.Fatalf("target rules: got %+v, want a/one and b/one mutated", got)
	}

	// Not enabled: no targets.
	off := mutatingPolicy(t, strings.Replace(mpolExistingHeader, "enabled: true", "enabled: false", 1))
	if off.MutatesExistingTargets() || len(off.MutateTargets(ctx, &engine.Request{Object: trigger}, targets)) != 0 {
		t.Fatal("a MutatingPolicy with mutateExisting disabled mutated targets")
	}
}
