package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	celgo "github.com/google/cel-go/cel"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine/cel"
)

// Messages of MutatingPolicy results in a background scan (R44).
const (
	MessageMutationApplied    = "success"
	MessageMutationNotApplied = "mutation is not applied"
)

// mutatingPolicy is a compiled MutatingPolicy or NamespacedMutatingPolicy.
// Its mutations are compiled and applied by Kubernetes' own machinery for
// MutatingAdmissionPolicies (k8s.io/apiserver's CEL compiler, match
// conditions and patchers: ApplyConfiguration and JSONPatch), in the
// Kubernetes CEL environment.
type mutatingPolicy struct {
	kind       string
	spec       policiesv1.MutatingPolicySpec
	match      *constraints
	matcher    matchconditions.Matcher
	patchers   []patch.Patcher
	applyCfg   bool // some mutation is an ApplyConfiguration
	env        *plugincel.CompositionEnv
	ignore     bool
	background bool
	// admissionPolicy is set for a Kubernetes MutatingAdmissionPolicy.
	admissionPolicy *admissionPolicy
	// existing is set for a MutatingPolicy that mutates existing resources.
	existing *mutateExisting
	// targetMatcher holds spec.targetMatchConditions (nil: none).
	targetMatcher matchconditions.Matcher
}

// CompileMutatingPolicy compiles a MutatingPolicy or (with its namespace
// set) a NamespacedMutatingPolicy. A policy with an expression that does
// not compile is refused, naming every such expression.
func CompileMutatingPolicy(mp *policiesv1.MutatingPolicy) (*Policy, error) {
	p := newCELPolicy(&mp.ObjectMeta, mp.Kind, policiesv1.KindMutatingPolicy, policiesv1.KindNamespacedMutatingPolicy, SourceMutatingPolicy)
	kind, name := p.Kind, p.Name
	spec := mp.Spec
	if len(spec.Mutations) == 0 {
		return nil, fmt.Errorf("%s %s: spec.mutations: at least one mutation is required", kind, name)
	}
	m, errs := compileMutations(kind, name, spec, false, true)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s %s: %w", kind, name, errors.Join(errs...))
	}
	var err error
	if m.match, err = compileConstraints(spec.MatchConstraints); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	if spec.MutateExistingEnabled() {
		if m.existing, err = compileMutateExisting(spec, p.Namespace != ""); err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
	}
	p.mpol = m
	return p, nil
}

// compileMutations compiles a mutating policy's variables, match
// conditions and mutations with Kubernetes' compiler (params declared when
// hasParams; Kyverno's pure CEL functions with kyvernoLibs), each error
// naming its field. The patchers keep the errors of the expressions they
// could not compile, and return them when applied.
func compileMutations(kind, name string, spec policiesv1.MutatingPolicySpec, hasParams, kyvernoLibs bool) (*mutatingPolicy, []error) {
	m := &mutatingPolicy{kind: kind, spec: spec, background: spec.BackgroundEnabled()}
	m.ignore = spec.FailurePolicy != nil && *spec.FailurePolicy == admissionregistrationv1.Ignore
	envSet, err := mutationEnv(kyvernoLibs)
	if err != nil {
		return m, []error{fmt.Errorf("CEL environment: %w", err)}
	}
	compiler, err := plugincel.NewCompositedCompiler(envSet)
	if err != nil {
		return m, []error{fmt.Errorf("CEL environment: %w", err)}
	}
	opts := plugincel.OptionalVariableDeclarations{HasParams: hasParams}
	var errs []error
	for i := range spec.Variables {
		v := spec.Variables[i]
		r := compiler.CompileAndStoreVariable(&namedExpression{name: v.Name, expression: v.Expression}, opts, environment.StoredExpressions)
		if r.Error != nil {
			errs = append(errs, fmt.Errorf("spec.variables[%d] (%s): %s", i, v.Name, r.Error.Detail))
		}
	}
	m.matcher = compileConditions(compiler, spec.MatchConditions, opts, m.ignore, "spec.matchConditions", "mutate", name, &errs)
	m.targetMatcher = compileConditions(compiler, spec.TargetMatchConditions, opts, m.ignore, "spec.targetMatchConditions", "mutate-target", name, &errs)
	patchOpts := opts
	patchOpts.HasPatchTypes = true
	for i, mu := range spec.Mutations {
		var ev plugincel.MutatingEvaluator
		switch {
		case mu.PatchType == admissionregistrationv1beta1.PatchTypeJSONPatch && mu.JSONPatch != nil:
			ev = compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: mu.JSONPatch.Expression}, patchOpts, environment.StoredExpressions)
			m.patchers = append(m.patchers, patch.NewJSONPatcher(ev))
		case mu.PatchType == admissionregistrationv1beta1.PatchTypeApplyConfiguration && mu.ApplyConfiguration != nil:
			ev = compiler.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: mu.ApplyConfiguration.Expression}, patchOpts, environment.StoredExpressions)
			m.patchers = append(m.patchers, patch.NewApplyConfigurationPatcher(ev))
			m.applyCfg = true
		default:
			errs = append(errs, fmt.Errorf("spec.mutations[%d]: patchType %q needs its %s expression", i, mu.PatchType, patchField(mu.PatchType)))
			continue
		}
		for _, e := range ev.CompilationErrors() {
			errs = append(errs, fmt.Errorf("spec.mutations[%d]: %w", i, e))
		}
	}
	m.env = compiler.CompositionEnv
	return m, errs
}

// compileConditions compiles match conditions into Kubernetes' matcher
// (nil without conditions), appending each compile error, named by field,
// to errs; failurePolicy Ignore (ignore) lets a condition that errs not
// apply.
func compileConditions(compiler *plugincel.CompositedCompiler, conds []admissionregistrationv1.MatchCondition, opts plugincel.OptionalVariableDeclarations, ignore bool, field, what, name string, errs *[]error) matchconditions.Matcher {
	if len(conds) == 0 {
		return nil
	}
	accessors := make([]plugincel.ExpressionAccessor, len(conds))
	for i := range conds {
		accessors[i] = (*matchconditions.MatchCondition)(&conds[i])
	}
	cond := compiler.CompileCondition(accessors, opts, environment.StoredExpressions)
	for _, e := range cond.CompilationErrors() {
		*errs = append(*errs, fmt.Errorf("%s: %w", field, e))
	}
	fail := admissionregistrationv1.Fail
	if ignore {
		fail = admissionregistrationv1.Ignore
	}
	return matchconditions.NewMatcher(cond, &fail, "policy", what, name)
}

// mutationEnvs are the environments of mutating policies: Kubernetes'
// (MutatingAdmissionPolicy), and Kubernetes' with Kyverno's pure functions
// (MutatingPolicy), each built once.
var mutationEnvs = sync.OnceValues(func() (*environment.EnvSet, error) {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        cel.PureLibraries(),
	})
})

func mutationEnv(kyvernoLibs bool) (*environment.EnvSet, error) {
	if !kyvernoLibs {
		return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()), nil
	}
	return mutationEnvs()
}

func patchField(t admissionregistrationv1beta1.PatchType) string {
	if t == admissionregistrationv1beta1.PatchTypeJSONPatch {
		return "jsonPatch"
	}
	return "applyConfiguration"
}

// namedExpression is a variable as the Kubernetes compiler reads it.
type namedExpression struct{ name, expression string }

func (n *namedExpression) GetName() string            { return n.name }
func (n *namedExpression) GetExpression() string      { return n.expression }
func (n *namedExpression) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.AnyType} }

// Mutating reports whether the policy is a MutatingPolicy: tally runs no
// mutating webhook, so it evaluates such a policy in background scans only.
func (p *Policy) Mutating() bool { return p != nil && p.mpol != nil }

// MutatingBackground reports whether a MutatingPolicy runs in background
// scans (spec.evaluation.background.enabled, on by default).
func (p *Policy) MutatingBackground() bool { return p != nil && p.mpol != nil && p.mpol.background }

// evaluate reports whether the policy's mutations are applied to the
// resource: pass "success" when applying them leaves it unchanged, fail
// "mutation is not applied" when they would change it (R44), skip when its
// match conditions are not met, error when a mutation cannot be applied.
func (m *mutatingPolicy) evaluate(e *evaluation) []RuleResult {
	res := e.res
	gvr := e.req.resource()
	if !m.match.matches(&res, gvr, e.req.operation(), e.req.NamespaceLabels) {
		return nil
	}
	if err := e.ctx.Err(); err != nil {
		return []RuleResult{e.vpolResult(Error, RuleEvaluation, stoppedMessage(err), nil)}
	}
	if m.admissionPolicy != nil {
		return m.evaluateAdmissionPolicy(e, gvr)
	}
	if _, done, exempt := e.celExceptions(m.kind, m.ignore); exempt {
		return []RuleResult{done}
	}
	return []RuleResult{m.apply(e, gvr)}
}

func (m *mutatingPolicy) apply(e *evaluation, gvr schema.GroupVersionResource) RuleResult {
	before, after, r, ok := m.mutate(e, gvr, nil)
	if !ok {
		// A MutatingPolicy whose match conditions do not hold is reported
		// skip "skip", as Kyverno's background controller reports it
		// (unlike a ValidatingPolicy's, which has no entry): issue 55.
		r.ConditionsNotMet = false
		return r
	}
	same, err := sameJSON(before, after)
	if err != nil {
		return e.vpolResult(Error, "", "mutation result: "+err.Error(), nil)
	}
	if same {
		return e.vpolResult(Pass, "", MessageMutationApplied, nil)
	}
	return e.vpolResult(Fail, "", MessageMutationNotApplied, nil)
}

// mutate applies the policy's mutations to the resource, in order: before
// is the resource (through the same conversion as the mutations' result),
// after the mutated resource. When the policy does not mutate it (its
// match conditions not met, or an error), ok is false and r says why.
func (m *mutatingPolicy) mutate(e *evaluation, gvr schema.GroupVersionResource, params runtime.Object) (before, after map[string]any, r RuleResult, ok bool) {
	return m.mutateWith(e, gvr, params, m.matcher)
}

// mutateWith is mutate with the given match conditions (a target's are
// spec.targetMatchConditions).
func (m *mutatingPolicy) mutateWith(e *evaluation, gvr schema.GroupVersionResource, params runtime.Object, matcher matchconditions.Matcher) (before, after map[string]any, r RuleResult, ok bool) {
	orig := &unstructured.Unstructured{Object: e.req.subject()}
	obj := orig.DeepCopy()
	gvk := obj.GroupVersionKind()
	attrs := m.attributes(e, obj, gvk, gvr)
	ctx := m.env.CreateContext(e.ctx)
	if matcher != nil {
		mr := matcher.Match(ctx, attrs, params, nil)
		if mr.Error != nil {
			return nil, nil, e.vpolResult(Error, RuleEvaluation, "failed to evaluate match conditions: "+mr.Error.Error(), nil), false
		}
		if !mr.Matches {
			r := e.vpolResult(Skip, "", "skip", nil)
			r.ConditionsNotMet = true
			return nil, nil, r, false
		}
	}
	ns := e.req.namespace(e.res.Namespace)
	converter := typeConverterFor(gvk)
	var current runtime.Object = obj
	for i, p := range m.patchers {
		patched, err := p.Patch(ctx, patch.Request{
			MatchedResource:     gvr,
			VersionedAttributes: attrs,
			ObjectInterfaces:    objectInterfaces,
			Namespace:           ns,
			TypeConverter:       converter,
			OptionalVariables:   plugincel.OptionalVariableBindings{VersionedParams: params},
		}, celconfig.RuntimeCELCostBudget)
		if err != nil {
			return nil, nil, e.vpolResult(Error, "", fmt.Sprintf("mutation %d: %v", i, err), nil), false
		}
		current = patched
		attrs = m.attributes(e, patched, gvk, gvr)
	}
	before = orig.Object
	if m.applyCfg {
		// ApplyConfigurations go through the kind's schema: the object is
		// compared with itself through the same conversion, so that only
		// the mutations count.
		if typed, err := converter.ObjectToTyped(orig, typed.AllowDuplicates); err == nil {
			if back, err := converter.TypedToObject(typed); err == nil {
				if u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(back); err == nil {
					before = u
				}
			}
		}
	}
	after, err := runtime.DefaultUnstructuredConverter.ToUnstructured(current)
	if err != nil {
		return nil, nil, e.vpolResult(Error, "", "mutation result: "+err.Error(), nil), false
	}
	return before, after, RuleResult{}, true
}

// Mutate applies a MutatingPolicy to the request's object as Kyverno's CLI
// does: the mutated object and a pass when the policy applies, skip when
// its match conditions are not met, error when a mutation cannot be
// applied; nothing when the policy does not match the resource (or is not
// a MutatingPolicy).
func (p *Policy) Mutate(ctx context.Context, req *Request) (patched map[string]any, result RuleResult, matched bool) {
	if p.mpol == nil {
		return nil, RuleResult{}, false
	}
	e, ok := p.begin(ctx, req) // R47, as Evaluate
	if !ok {
		return nil, RuleResult{}, false
	}
	gvr := req.resource()
	if !p.mpol.match.matches(&e.res, gvr, req.operation(), req.NamespaceLabels) {
		return nil, RuleResult{}, false
	}
	if p.mpol.admissionPolicy != nil {
		return p.mpol.mutateAdmissionPolicy(e, gvr)
	}
	if _, done, exempt := e.celExceptions(p.mpol.kind, p.mpol.ignore); exempt {
		return nil, done, true
	}
	_, after, r, ok := p.mpol.mutate(e, gvr, nil)
	if !ok {
		return nil, r, true
	}
	return after, e.vpolResult(Pass, "", MessageMutationApplied, nil), true
}

// attributes is the request as the Kubernetes machinery reads it: a CREATE
// of the object (a background scan evaluates resources as if created).
func (m *mutatingPolicy) attributes(e *evaluation, obj runtime.Object, gvk schema.GroupVersionKind, gvr schema.GroupVersionResource) *admission.VersionedAttributes {
	a := admission.NewAttributesRecord(obj, nil, gvk, e.res.Namespace, e.res.Name, gvr, e.req.Subresource, admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{})
	return &admission.VersionedAttributes{Attributes: a, VersionedKind: gvk, VersionedObject: obj}
}

// namespace is the request's namespace as a Namespace object (nil for a
// cluster-scoped resource).
func (req *Request) namespace(ns string) *corev1.Namespace {
	m := req.namespaceObject(ns)
	if m == nil {
		return nil
	}
	var out corev1.Namespace
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &out); err != nil {
		return nil
	}
	return &out
}

func sameJSON(a, b map[string]any) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ja, jb), nil
}

var objectInterfaces = admission.NewObjectInterfacesFromScheme(runtime.NewScheme())

// builtinTypes converts Kubernetes' own kinds through their schemas; other
// kinds (custom resources) are converted by a schema deduced from the
// object, as the API server does for kinds it has no schema of.
var (
	builtinTypes = sync.OnceValue(func() managedfields.TypeConverter { return applyconfigurations.NewTypeConverter(scheme.Scheme) })
	deducedTypes = managedfields.NewDeducedTypeConverter()
)

func typeConverterFor(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	if scheme.Scheme.Recognizes(gvk) {
		return builtinTypes()
	}
	return deducedTypes
}
