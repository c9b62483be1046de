package engine

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine/cel"
)

// SourceValidatingAdmissionPolicy is the report source of a Kubernetes
// ValidatingAdmissionPolicy's results.
const SourceValidatingAdmissionPolicy = "ValidatingAdmissionPolicy"

// PropertyBinding names the binding a ValidatingAdmissionPolicy result was
// evaluated through.
const PropertyBinding = "binding"

// ParamSource gives the params objects of a ValidatingAdmissionPolicy
// binding: the one named, or those a selector picks, of the policy's
// paramKind (offline, the test's param resources; in a cluster, its cache).
type ParamSource interface {
	Params(ctx context.Context, kind schema.GroupVersionKind, namespace, name string, selector *metav1.LabelSelector) ([]map[string]any, error)
}

// vap is a compiled ValidatingAdmissionPolicy with its bindings.
type vap struct {
	name string
	// raw is what defines the policy's results: its spec and bindings.
	raw       any
	match     *constraints
	paramKind *schema.GroupVersionKind
	prog      *cel.Program
	ignore    bool
	bindings  []vapBinding
}

type vapBinding struct {
	name     string
	match    *constraints // nil: the binding matches every resource the policy does
	paramRef *admissionregistrationv1.ParamRef
}

// CompileValidatingAdmissionPolicy compiles a Kubernetes
// ValidatingAdmissionPolicy with the bindings that name it (others are
// ignored). As in Kyverno's reports, an expression that does not compile is
// not refused: it is an error result where the policy applies.
func CompileValidatingAdmissionPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy, bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) (*Policy, error) {
	out := &Policy{
		Name:        p.Name,
		Kind:        "ValidatingAdmissionPolicy",
		Source:      SourceValidatingAdmissionPolicy,
		Annotations: p.Annotations,
		Scored:      p.Annotations[AnnotationScored] != "false",
		Category:    p.Annotations[AnnotationCategory],
		Severity:    p.Annotations[AnnotationSeverity],
	}
	v := &vap{name: p.Name, raw: []any{p.Spec, bindings}}
	v.ignore = p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy == admissionregistrationv1.Ignore
	var err error
	if v.match, err = compileConstraints(p.Spec.MatchConstraints); err != nil {
		return nil, fmt.Errorf("ValidatingAdmissionPolicy %s: %w", p.Name, err)
	}
	if pk := p.Spec.ParamKind; pk != nil {
		gv, err := schema.ParseGroupVersion(pk.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("ValidatingAdmissionPolicy %s: spec.paramKind.apiVersion: %w", p.Name, err)
		}
		gvk := gv.WithKind(pk.Kind)
		v.paramKind = &gvk
	}
	// An expression that does not compile is kept in the program and fails
	// its own validation at evaluation, as Kubernetes reports it; only a
	// missing environment (nil program) stops the policy here.
	var compileErr error
	v.prog, compileErr = cel.Compile(cel.Spec{
		Mode:             cel.ModeKubernetes,
		HasParams:        v.paramKind != nil,
		Variables:        p.Spec.Variables,
		MatchConditions:  p.Spec.MatchConditions,
		Validations:      p.Spec.Validations,
		AuditAnnotations: p.Spec.AuditAnnotations,
	})
	if v.prog == nil {
		return nil, fmt.Errorf("ValidatingAdmissionPolicy %s: no CEL environment: %w", p.Name, compileErr)
	}
	for _, b := range bindings {
		if b.Spec.PolicyName != p.Name {
			continue
		}
		vb := vapBinding{name: b.Name, paramRef: b.Spec.ParamRef}
		if b.Spec.MatchResources != nil {
			if vb.match, err = compileConstraints(b.Spec.MatchResources); err != nil {
				return nil, fmt.Errorf("ValidatingAdmissionPolicyBinding %s: %w", b.Name, err)
			}
		}
		v.bindings = append(v.bindings, vb)
	}
	out.vap = v
	return out, nil
}

// evaluate applies the policy as Kyverno's reports controller does: with
// no binding, once on its own constraints; else through each binding that
// selects the resource, the last one's outcome kept (no binding selecting
// it: no result).
func (v *vap) evaluate(e *evaluation) []RuleResult {
	res := e.res
	gvr := e.req.resource()
	op := e.req.operation()
	if !v.match.matches(&res, gvr, op, e.req.NamespaceLabels) {
		return nil
	}
	if len(v.bindings) == 0 {
		return []RuleResult{v.outcome(e, nil, "")}
	}
	var last *RuleResult
	for _, b := range v.bindings {
		if b.match != nil && !b.match.matches(&res, gvr, op, e.req.NamespaceLabels) {
			continue
		}
		r, ok := v.throughBinding(e, b)
		if ok {
			last = &r
		}
	}
	if last == nil {
		return nil
	}
	return []RuleResult{*last}
}

// throughBinding evaluates the policy with a binding's params: once per
// params object, the first that does not pass deciding.
func (v *vap) throughBinding(e *evaluation, b vapBinding) (RuleResult, bool) {
	if v.paramKind == nil || b.paramRef == nil {
		return v.outcome(e, nil, b.name), true
	}
	params, r, msg, ok := e.bindingParams(*v.paramKind, b.paramRef)
	if !ok {
		return v.result(e, r, msg, b.name), true
	}
	var out RuleResult
	for i, p := range params {
		out = v.outcome(e, cel.Normalize(p), b.name)
		if out.Result != Pass || i == len(params)-1 {
			break
		}
	}
	return out, true
}

// bindingParams reads the params objects a binding names for an admission
// policy of params of that kind (its namespace, else the resource's). When
// there are none to evaluate with, ok is false and result and msg say what
// the binding gives: an error reading them, or, none found, a pass (Allow)
// or a failure (Deny, the default), as Kubernetes reports them.
func (e *evaluation) bindingParams(kind schema.GroupVersionKind, ref *admissionregistrationv1.ParamRef) (params []map[string]any, result wgv1alpha2.Result, msg string, ok bool) {
	ns := ref.Namespace
	if ns == "" {
		ns = e.res.Namespace
	}
	var err error
	if e.req.Params == nil {
		err = fmt.Errorf("no params source for %s", kind.Kind)
	} else {
		params, err = e.req.Params.Params(e.ctx, kind, ns, ref.Name, ref.Selector)
	}
	switch {
	case err != nil:
		return nil, Error, "failed to get params: " + err.Error(), false
	case len(params) > 0:
		return params, "", "", true
	case ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.AllowAction:
		return nil, Pass, "", false
	}
	return nil, Fail, "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction", false
}

// outcome evaluates the policy's expressions once (with params, when
// given) and makes its result: match conditions not met skip; errors,
// whatever the failure policy, are errors; a false validation fails with
// the API server's message; else a pass with no message.
func (v *vap) outcome(e *evaluation, params any, binding string) RuleResult {
	in := e.req.celInput()
	if params != nil {
		copied := *in
		copied.Params = params
		in = &copied
	}
	o := v.prog.Evaluate(e.ctx, in)
	switch {
	case o.NotMet || (o.ConditionErr != nil && v.ignore):
		return v.result(e, Skip, "match conditions aren't met", binding)
	case o.ConditionErr != nil:
		return v.result(e, Error, o.ConditionErr.Error(), binding)
	case o.Failed < 0:
		return v.result(e, Pass, "", binding)
	case o.Err != nil:
		return v.result(e, Error, celErrorMessage(v.prog.Expression(o.Failed), o.Err), binding)
	}
	return v.result(e, Fail, celFailMessage(v.prog, o, ""), binding)
}

func (v *vap) result(e *evaluation, r wgv1alpha2.Result, msg, binding string) RuleResult {
	if r == Fail && !e.policy.Scored {
		r = Warn
	}
	var props map[string]string
	if binding != "" {
		props = map[string]string{PropertyBinding: binding}
	}
	return RuleResult{Policy: e.policy.Name, Rule: v.name, Result: r, Message: msg, Properties: props, Source: SourceValidatingAdmissionPolicy}
}
