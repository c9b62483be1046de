package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine/cel"
)

// Sources of results, as reports spell them.
const (
	SourceKyverno          = "kyverno"
	SourceValidatingPolicy = "KyvernoValidatingPolicy"
	SourceMutatingPolicy   = "KyvernoMutatingPolicy"
)

// Rules of ValidatingPolicy results that are not the policy's own outcome.
const (
	RuleException  = "exception"
	RuleEvaluation = "evaluation"
	RuleMatch      = "match"
)

// PropertyValidationIndex is the result property naming the validation
// that failed or erred.
const PropertyValidationIndex = "cel.validationIndex"

// validatingPolicy is a compiled ValidatingPolicy or
// NamespacedValidatingPolicy: the policy and its autogen variants, each a
// program of its own with the same name.
type validatingPolicy struct {
	kind     string
	spec     policiesv1.ValidatingPolicySpec
	variants []*vpolVariant
	// ignore is failurePolicy Ignore: match conditions that err do not apply.
	ignore bool
	// image is set for an ImageValidatingPolicy (R42).
	image *imagePolicy
	// payload is the evaluation mode of a policy that evaluates payloads of
	// that kind (Request.JSON, Request.Authz), never Kubernetes resources:
	// "JSON", or "Envoy" or "HTTP" (it authorizes requests); "" for
	// Kubernetes.
	payload string
}

type vpolVariant struct {
	match *constraints
	spec  cel.Spec
	prog  *cel.Program
}

// CompileValidatingPolicy compiles a ValidatingPolicy or (with its
// namespace set) a NamespacedValidatingPolicy. A policy with an expression
// that does not compile is refused, naming every such expression: Kyverno
// does not evaluate it.
func CompileValidatingPolicy(vp *policiesv1.ValidatingPolicy) (*Policy, error) {
	p := newCELPolicy(&vp.ObjectMeta, vp.Kind, policiesv1.KindValidatingPolicy, policiesv1.KindNamespacedValidatingPolicy, SourceValidatingPolicy)
	kind, name := p.Kind, p.Name
	spec := vp.Spec
	base := cel.Spec{
		Mode:             cel.ModeKyverno,
		Namespaced:       p.Namespace != "",
		Variables:        spec.Variables,
		MatchConditions:  spec.MatchConditions,
		Validations:      spec.Validations,
		AuditAnnotations: spec.AuditAnnotations,
	}
	if len(spec.Validations) == 0 {
		return nil, fmt.Errorf("%s %s: spec.validations: at least one validation is required", kind, name)
	}
	if mode, ok := payloadModes[strings.ToLower(evaluationMode(spec.Evaluation))]; ok {
		// Payload policies never match a resource: they evaluate the
		// payloads of their mode (the CLI's jsonPayloads, envoyPayloads,
		// httpPayloads), whatever their constraints.
		v := &validatingPolicy{kind: kind, spec: spec, payload: mode.name}
		v.ignore = spec.FailurePolicy != nil && *spec.FailurePolicy == admissionregistrationv1.Ignore
		base.Mode, base.Namespaced = mode.cel, false
		if !mode.annotations {
			base.AuditAnnotations = nil
		}
		prog, err := cel.Compile(base)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		v.variants = []*vpolVariant{{spec: base, prog: prog}}
		p.vpol = v
		return p, nil
	}
	v, err := compileVariants(kind, name, spec, base)
	if err != nil {
		return nil, err
	}
	p.vpol = v
	return p, nil
}

// payloadModes are the evaluation modes of policies that evaluate
// payloads, by their name in lower case: the mode's name, its CEL
// environment, and whether its audit annotations are evaluated (an
// authorization's answer has none).
var payloadModes = map[string]struct {
	name        string
	cel         cel.Mode
	annotations bool
}{
	"json":  {"JSON", cel.ModeKyverno, true},
	"envoy": {"Envoy", cel.ModeEnvoy, false},
	"http":  {"HTTP", cel.ModeHTTP, false},
}

func evaluationMode(e *policiesv1.Evaluation) string {
	if e == nil {
		return ""
	}
	return e.Mode
}

// authorize answers an authorization request as Kyverno's CLI reports it:
// pass "request allowed"; fail "request denied with status code N"
// (Envoy) or "request denied, reason: R" (HTTP); skip "request does not
// match" when no validation answers; error with the evaluation's error.
func (v *validatingPolicy) authorize(e *evaluation, variant *vpolVariant) RuleResult {
	in := &cel.Input{Object: cel.Normalize(e.req.Object), Data: e.req.Data}
	d, err := variant.prog.Authorize(e.ctx, in)
	switch {
	case err != nil:
		return e.vpolResult(Error, "", err.Error(), nil)
	case !d.Answered:
		return e.vpolResult(Skip, "", "request does not match", nil)
	case d.Allowed:
		return e.vpolResult(Pass, "", "request allowed", nil)
	case v.payload == "Envoy":
		return e.vpolResult(Fail, "", fmt.Sprintf("request denied with status code %d", d.Status), nil)
	}
	return e.vpolResult(Fail, "", "request denied, reason: "+d.Reason, nil)
}

// newCELPolicy is the Policy of a policies.kyverno.io policy: kind (the
// object's, else cluster), its name ("namespace/name" for the namespaced
// kind), source and annotations.
func newCELPolicy(md *metav1.ObjectMeta, kind, cluster, namespaced, source string) *Policy {
	if kind == "" {
		kind = cluster
	}
	p := &Policy{
		Name:        md.Name,
		Kind:        kind,
		Source:      source,
		Annotations: md.Annotations,
		Scored:      md.Annotations[AnnotationScored] != "false",
		Category:    md.Annotations[AnnotationCategory],
		Severity:    md.Annotations[AnnotationSeverity],
	}
	if kind == namespaced {
		p.Name, p.Namespace = md.Namespace+"/"+md.Name, md.Namespace
	}
	return p
}

// shiftSpec is a spec with every expression moved to a Pod template.
func shiftSpec(s cel.Spec, prefix string) cel.Spec {
	out := s
	out.Variables = make([]admissionregistrationv1.Variable, len(s.Variables))
	for i, v := range s.Variables {
		out.Variables[i] = admissionregistrationv1.Variable{Name: v.Name, Expression: shiftObjectPaths(v.Expression, prefix)}
	}
	out.MatchConditions = make([]admissionregistrationv1.MatchCondition, len(s.MatchConditions))
	for i, c := range s.MatchConditions {
		out.MatchConditions[i] = admissionregistrationv1.MatchCondition{Name: c.Name, Expression: shiftObjectPaths(c.Expression, prefix)}
	}
	out.Validations = make([]admissionregistrationv1.Validation, len(s.Validations))
	for i, v := range s.Validations {
		v.Expression = shiftObjectPaths(v.Expression, prefix)
		v.MessageExpression = shiftObjectPaths(v.MessageExpression, prefix)
		out.Validations[i] = v
	}
	out.AuditAnnotations = make([]admissionregistrationv1.AuditAnnotation, len(s.AuditAnnotations))
	for i, a := range s.AuditAnnotations {
		out.AuditAnnotations[i] = admissionregistrationv1.AuditAnnotation{Key: a.Key, ValueExpression: shiftObjectPaths(a.ValueExpression, prefix)}
	}
	out.Extras = make([]admissionregistrationv1.Variable, len(s.Extras))
	for i, x := range s.Extras {
		out.Extras[i] = admissionregistrationv1.Variable{Name: x.Name, Expression: shiftObjectPaths(x.Expression, prefix)}
	}
	return out
}

// evaluate applies the policy (and its variants) to a request, per
// Kyverno's decision procedure: constraints, exceptions, match conditions,
// validations in order, audit annotations.
func (v *validatingPolicy) evaluate(e *evaluation) []RuleResult {
	res := e.res
	gvr := e.req.resource()
	var out []RuleResult
	// A DeletingPolicy evaluates JSON payloads whatever its mode, as
	// Kyverno's CLI does: its conditions alone when the payload names no
	// apiVersion and kind.
	deletingJSON := e.policy.deleting && e.req.JSON
	if !deletingJSON && v.payload != e.req.payload() {
		return nil // a payload policy on a resource, or a payload under a policy of another mode
	}
	if v.payload == "Envoy" || v.payload == "HTTP" {
		return []RuleResult{v.authorize(e, v.variants[0])}
	}
	unmatched := v.payload == "JSON" || (deletingJSON && (res.Version == "" || res.Kind == ""))
	variants := v.variants
	if unmatched {
		variants = variants[:1]
	}
	for _, variant := range variants {
		if !unmatched && !variant.match.matches(&res, gvr, e.req.operation(), e.req.NamespaceLabels) {
			continue
		}
		if err := e.ctx.Err(); err != nil {
			out = append(out, e.vpolResult(Error, RuleEvaluation, stoppedMessage(err), nil))
			continue
		}
		out = append(out, v.evaluateVariant(e, variant))
	}
	return out
}

func (v *validatingPolicy) evaluateVariant(e *evaluation, variant *vpolVariant) RuleResult {
	in, done, exempt := e.celExceptions(v.kind, v.ignore)
	if exempt {
		return done
	}
	ctx := e.ctx
	if in.Data != nil {
		// The data it reads is recorded against the policy (rescanned when
		// a GlobalContextEntry it reads changes).
		plain := e.policy.Name[strings.LastIndex(e.policy.Name, "/")+1:]
		ctx = cel.WithPolicy(ctx, v.kind+"/"+plain)
	}
	if v.image != nil {
		notMet, err := variant.prog.Conditions(ctx, in)
		switch {
		case notMet || (err != nil && v.ignore):
			r := e.vpolResult(Skip, "", "skip", nil)
			r.ConditionsNotMet = true
			return r
		case err != nil:
			return e.ivpolError(err)
		}
		ie := *e
		ie.ctx = ctx
		return v.evaluateImages(&ie, variant, in)
	}
	o := variant.prog.Evaluate(ctx, in)
	switch {
	case o.NotMet || (o.ConditionErr != nil && v.ignore):
		r := e.vpolResult(Skip, "", "skip", nil)
		r.ConditionsNotMet = true
		return r
	case o.ConditionErr != nil:
		return e.vpolResult(Error, RuleEvaluation, "failed to load context: "+o.ConditionErr.Error(), nil)
	case o.Err != nil:
		return e.vpolResult(Error, "", "error: "+o.Err.Error(), map[string]string{PropertyValidationIndex: strconv.Itoa(o.Failed)})
	case o.AnnotationErr != nil && o.Failed >= 0:
		return e.vpolResult(Error, "", "error: "+o.AnnotationErr.Error(), nil)
	case o.AnnotationErr != nil:
		return e.vpolResult(Error, RuleEvaluation, "failed to load context: "+o.AnnotationErr.Error(), nil)
	case o.Failed < 0:
		return e.vpolResult(Pass, "", "success", o.Annotations)
	}
	props := map[string]string{PropertyValidationIndex: strconv.Itoa(o.Failed)}
	for k, val := range o.Annotations {
		props[k] = val
	}
	return e.vpolResult(Fail, "", vpolFailMessage(variant.prog, o), props)
}

// celExceptions applies the CEL PolicyExceptions that name the policy (of
// kind) to the request. Every exception is evaluated first, so that the
// answer does not depend on their order: a full exemption wins (exempt,
// with its result); else an exception that could not be evaluated errs the
// policy, unless its failurePolicy is Ignore (the exception then does not
// apply). Otherwise in is the CEL input the policy reads, with the partial
// exceptions' images and values and the policy's own namespace (R47).
func (e *evaluation) celExceptions(kind string, ignore bool) (in *cel.Input, done RuleResult, exempt bool) {
	in = e.req.celInput()
	var full []*CELException
	var matched []*CELException
	var images, values []string
	var exceptionErr error
	for _, x := range e.req.CELExceptions {
		if !x.Refers(e.policy, kind) {
			continue
		}
		ok, err := x.applies(e, in)
		if err != nil {
			if exceptionErr == nil {
				exceptionErr = err
			}
			continue
		}
		if !ok {
			continue
		}
		matched = append(matched, x)
		if x.partial() {
			images = append(images, x.Spec.Images...)
			values = append(values, x.Spec.AllowedValues...)
		} else {
			full = append(full, x)
		}
	}
	if len(full) > 0 {
		return nil, e.exceptionResult(full, matched), true
	}
	if exceptionErr != nil && !ignore {
		return nil, e.vpolResult(Error, RuleEvaluation, "failed to load context: "+exceptionErr.Error(), nil), true
	}
	if len(images) > 0 || len(values) > 0 || e.policy.Namespace != "" {
		copied := *in
		copied.AllowedImages, copied.AllowedValues = images, values
		copied.OwnNamespace = e.policy.Namespace // R47
		in = &copied
	}
	return in, RuleResult{}, false
}

// vpolFailMessage is Kyverno's message of a false validation: the
// messageExpression's value (an empty one is kept), else the message, else
// a default naming the validation.
func vpolFailMessage(p *cel.Program, o cel.Outcome) string {
	var m string
	switch {
	case o.HasMessageExpression && errors.Is(o.MessageErr, cel.ErrNotString):
		m = "failed to convert message expression to string: " + o.MessageErr.Error()
	case o.HasMessageExpression && o.MessageErr != nil:
		m = "failed to evaluate message expression: " + o.MessageErr.Error()
	case o.HasMessageExpression:
		m = o.Message
	default:
		m = p.Message(o.Failed)
	}
	if m == "" {
		m = fmt.Sprintf("CEL expression validation failed at index %d", o.Failed)
	}
	return m
}

// exceptionResult is the result of a policy fully exempted by exceptions:
// skip, or pass when the exception of highest priority says so.
func (e *evaluation) exceptionResult(full, matched []*CELException) RuleResult {
	chosen := full[0]
	for _, x := range full[1:] {
		if x.Priority > chosen.Priority {
			chosen = x
		}
	}
	result, verb := Skip, "skipped"
	if chosen.Spec.ReportResult == "pass" {
		result, verb = Pass, "passed"
	}
	keys := make([]string, len(matched))
	names := make([]string, len(matched))
	for i, x := range matched {
		keys[i], names[i] = x.Key, x.ObjectName
	}
	r := e.vpolResult(result, RuleException, "rule is "+verb+" due to policy exception: "+strings.Join(keys, ", "), map[string]string{"exceptions": strings.Join(names, ",")})
	r.Exceptions = names
	return r
}

// vpolResult builds a ValidatingPolicy's (or MutatingPolicy's, or
// ImageValidatingPolicy's) result: properties named message
// or <result>Message replace the message (as Kyverno's post-processing
// does), and an unscored fail is a warn.
func (e *evaluation) vpolResult(result wgv1alpha2.Result, rule, msg string, props map[string]string) RuleResult {
	if m := props[string(result)+"Message"]; m != "" {
		msg = m
	}
	if m := props["message"]; m != "" {
		msg = m
	}
	if result == Fail && !e.policy.Scored {
		result = Warn
	}
	if rule == "" && e.policy.Source == SourceImageValidatingPolicy {
		// An ImageValidatingPolicy's own outcome is reported under a rule
		// named as the policy (its plain name), as Kyverno reports it.
		rule = e.policy.Name[strings.LastIndex(e.policy.Name, "/")+1:]
	}
	return RuleResult{Policy: e.policy.Name, Rule: rule, Result: result, Message: msg, Properties: props, Source: e.policy.Source}
}

// EvaluationMode is a ValidatingPolicy's evaluation mode (Kubernetes,
// JSON, Envoy or HTTP); Kubernetes for every other policy.
func (p *Policy) EvaluationMode() string {
	if p == nil || p.vpol == nil || p.vpol.payload == "" {
		return "Kubernetes"
	}
	return p.vpol.payload
}
