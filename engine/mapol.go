package engine

import (
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
)

// SourceMutatingAdmissionPolicy is the report source of a Kubernetes
// MutatingAdmissionPolicy's results.
const SourceMutatingAdmissionPolicy = "MutatingAdmissionPolicy"

// PropertyMAPBinding names the binding a MutatingAdmissionPolicy result
// was evaluated through.
const PropertyMAPBinding = "mapBinding"

// Messages of MutatingAdmissionPolicy results, as Kyverno's reports
// controller writes them.
const (
	MessageMAPApplied  = "mutation is successfully applied"
	MessageMAPNotMet   = "match conditions aren't met"
	kindMutatingAdmPol = "MutatingAdmissionPolicy"
)

// mapBinding is a MutatingAdmissionPolicyBinding of a compiled policy.
type mapBinding struct {
	name     string
	match    *constraints // nil: the binding matches every resource the policy does
	paramRef *admissionregistrationv1.ParamRef
}

// CompileMutatingAdmissionPolicy compiles a Kubernetes
// MutatingAdmissionPolicy with the bindings that name it (others are
// ignored), for background scans as Kyverno's reports controller runs them
// (behind its --mutatingAdmissionPolicyReports): rule and policy are the
// policy's name, pass "mutation is successfully applied" when its
// mutations leave the resource unchanged, fail "mutation is not applied"
// when they would change it, skip when its match conditions are not met,
// property mapBinding. As Kubernetes does, an expression that does not
// compile is not refused: it is an error result where the policy applies.
func CompileMutatingAdmissionPolicy(p *admissionregistrationv1beta1.MutatingAdmissionPolicy, bindings []*admissionregistrationv1beta1.MutatingAdmissionPolicyBinding) (*Policy, error) {
	out := &Policy{
		Name:        p.Name,
		Kind:        kindMutatingAdmPol,
		Source:      SourceMutatingAdmissionPolicy,
		Annotations: p.Annotations,
		Scored:      p.Annotations[AnnotationScored] != "false",
		Category:    p.Annotations[AnnotationCategory],
		Severity:    p.Annotations[AnnotationSeverity],
	}
	// The spec's fields are a MutatingPolicy's, with the same JSON names.
	var spec policiesv1.MutatingPolicySpec
	if err := sameShape(p.Spec, &spec); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kindMutatingAdmPol, p.Name, err)
	}
	var paramKind *schema.GroupVersionKind
	if pk := p.Spec.ParamKind; pk != nil {
		gv, err := schema.ParseGroupVersion(pk.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("%s %s: spec.paramKind.apiVersion: %w", kindMutatingAdmPol, p.Name, err)
		}
		gvk := gv.WithKind(pk.Kind)
		paramKind = &gvk
	}
	m, _ := compileMutations(kindMutatingAdmPol, p.Name, spec, paramKind != nil, false)
	if m.env == nil {
		return nil, fmt.Errorf("%s %s: no CEL environment", kindMutatingAdmPol, p.Name)
	}
	m.background = true
	m.admissionPolicy = &admissionPolicy{name: p.Name, paramKind: paramKind, raw: []any{p.Spec, bindings}}
	var err error
	if m.match, err = compileConstraints(spec.MatchConstraints); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kindMutatingAdmPol, p.Name, err)
	}
	for _, b := range bindings {
		if b.Spec.PolicyName != p.Name {
			continue
		}
		mb := mapBinding{name: b.Name}
		if b.Spec.ParamRef != nil {
			mb.paramRef = &admissionregistrationv1.ParamRef{}
			if err := sameShape(b.Spec.ParamRef, mb.paramRef); err != nil {
				return nil, fmt.Errorf("MutatingAdmissionPolicyBinding %s: %w", b.Name, err)
			}
		}
		if b.Spec.MatchResources != nil {
			var mr admissionregistrationv1.MatchResources
			if err := sameShape(b.Spec.MatchResources, &mr); err != nil {
				return nil, fmt.Errorf("MutatingAdmissionPolicyBinding %s: %w", b.Name, err)
			}
			if mb.match, err = compileConstraints(&mr); err != nil {
				return nil, fmt.Errorf("MutatingAdmissionPolicyBinding %s: %w", b.Name, err)
			}
		}
		m.admissionPolicy.bindings = append(m.admissionPolicy.bindings, mb)
	}
	out.mpol = m
	return out, nil
}

// admissionPolicy is what a MutatingAdmissionPolicy adds to a mutating
// policy: its params' kind and its bindings.
type admissionPolicy struct {
	name      string
	paramKind *schema.GroupVersionKind
	raw       any
	bindings  []mapBinding
}

// sameShape copies a value into another type of the same JSON form (the
// admissionregistration v1beta1 types into their v1 or policies.kyverno.io
// counterparts).
func sameShape(from, to any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, to)
}

// evaluateAdmissionPolicy applies a MutatingAdmissionPolicy as Kyverno's
// reports controller does: with no binding, once on its own constraints;
// else through each binding that selects the resource, the last one's
// outcome kept (no binding selecting it: no result).
func (m *mutatingPolicy) evaluateAdmissionPolicy(e *evaluation, gvr schema.GroupVersionResource) []RuleResult {
	a := m.admissionPolicy
	res := e.res
	op := e.req.operation()
	if len(a.bindings) == 0 {
		return []RuleResult{m.mapOutcome(e, gvr, nil, "")}
	}
	var last *RuleResult
	for _, b := range a.bindings {
		if b.match != nil && !b.match.matches(&res, gvr, op, e.req.NamespaceLabels) {
			continue
		}
		r := m.throughBinding(e, gvr, b)
		last = &r
	}
	if last == nil {
		return nil
	}
	return []RuleResult{*last}
}

// throughBinding applies the policy with a binding's params: once per
// params object, the first that does not pass deciding.
func (m *mutatingPolicy) throughBinding(e *evaluation, gvr schema.GroupVersionResource, b mapBinding) RuleResult {
	a := m.admissionPolicy
	if a.paramKind == nil || b.paramRef == nil {
		return m.mapOutcome(e, gvr, nil, b.name)
	}
	params, r, msg, ok := e.bindingParams(*a.paramKind, b.paramRef)
	if !ok {
		if r == Pass {
			msg = MessageMAPApplied
		}
		return m.mapResult(e, RuleResult{Result: r, Message: msg}, b.name)
	}
	var out RuleResult
	for i, p := range params {
		out = m.mapOutcome(e, gvr, &unstructured.Unstructured{Object: p}, b.name)
		if out.Result != Pass || i == len(params)-1 {
			break
		}
	}
	return out
}

// mapOutcome applies the mutations once (with params, when given).
func (m *mutatingPolicy) mapOutcome(e *evaluation, gvr schema.GroupVersionResource, params runtime.Object, binding string) RuleResult {
	before, after, r, ok := m.mutate(e, gvr, params)
	if !ok {
		if r.ConditionsNotMet {
			r.Message = MessageMAPNotMet
		}
		return m.mapResult(e, r, binding)
	}
	same, err := sameJSON(before, after)
	switch {
	case err != nil:
		r = RuleResult{Result: Error, Message: "mutation result: " + err.Error()}
	case same:
		r = RuleResult{Result: Pass, Message: MessageMAPApplied}
	default:
		r = RuleResult{Result: Fail, Message: MessageMutationNotApplied}
	}
	return m.mapResult(e, r, binding)
}

// mapResult is a MutatingAdmissionPolicy's result: rule the policy's name,
// property mapBinding; an unscored fail is a warn.
func (m *mutatingPolicy) mapResult(e *evaluation, r RuleResult, binding string) RuleResult {
	if r.Result == Fail && !e.policy.Scored {
		r.Result = Warn
	}
	var props map[string]string
	if binding != "" {
		props = map[string]string{PropertyMAPBinding: binding}
	}
	return RuleResult{Policy: e.policy.Name, Rule: m.admissionPolicy.name, Result: r.Result, Message: r.Message, Properties: props, Source: SourceMutatingAdmissionPolicy}
}

// mutateAdmissionPolicy applies a MutatingAdmissionPolicy as Kyverno's CLI
// does: through the first binding that selects the resource (with its
// params object, or the list of those its selector matches), or on its own
// when it has no binding.
func (m *mutatingPolicy) mutateAdmissionPolicy(e *evaluation, gvr schema.GroupVersionResource) (map[string]any, RuleResult, bool) {
	a := m.admissionPolicy
	res := e.res
	var params runtime.Object
	binding := ""
	if len(a.bindings) > 0 {
		var chosen *mapBinding
		for i := range a.bindings {
			if b := &a.bindings[i]; b.match == nil || b.match.matches(&res, gvr, e.req.operation(), e.req.NamespaceLabels) {
				chosen = b
				break
			}
		}
		if chosen == nil {
			return nil, RuleResult{}, false
		}
		binding = chosen.name
		if a.paramKind != nil && chosen.paramRef != nil {
			found, r, msg, ok := e.bindingParams(*a.paramKind, chosen.paramRef)
			switch {
			case ok && chosen.paramRef.Selector != nil:
				// Kyverno's CLI hands the params a selector matches over as
				// one list (params.items), not once each.
				list := &unstructured.UnstructuredList{}
				for _, f := range found {
					list.Items = append(list.Items, unstructured.Unstructured{Object: f})
				}
				params = list
			case ok:
				params = &unstructured.Unstructured{Object: found[0]}
			case r != Pass:
				return nil, m.mapResult(e, RuleResult{Result: r, Message: msg}, binding), true
			}
		}
	}
	_, after, r, ok := m.mutate(e, gvr, params)
	if !ok {
		if r.ConditionsNotMet {
			r.Message = MessageMAPNotMet
		}
		return nil, m.mapResult(e, r, binding), true
	}
	return after, m.mapResult(e, RuleResult{Result: Pass, Message: MessageMAPApplied}, binding), true
}
