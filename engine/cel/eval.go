package cel

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Input is what one evaluation reads. Object, OldObject, Request, Namespace
// and Params are JSON-shaped values (maps, slices, strings, bools, int64,
// float64), or such values made Shared; nil reads as null.
type Input struct {
	Object, OldObject any
	// Request is the admission request (a background scan's is synthetic:
	// a CREATE with no user).
	Request map[string]any
	// Namespace is namespaceObject: nil for cluster-scoped resources.
	Namespace map[string]any
	Params    any
	// Data serves the `resource` library (ModeKyverno); nil offline.
	Data ClusterData
	// OwnNamespace, for a namespaced policy, is the one namespace its
	// `resource` calls may read (R47): a call naming another namespace, or
	// none (a cluster-scoped kind, every namespace), is an error and no read
	// is made with tally's identity. Empty for a cluster-wide policy.
	OwnNamespace string
	// AllowedImages and AllowedValues are `exceptions.allowedImages` and
	// `exceptions.allowedValues` (ModeKyverno).
	AllowedImages, AllowedValues []string
	// Images, Attestors and Attestations are ModeImage's `images`,
	// `attestors` and `attestations`; Verify serves its functions (nil: they
	// fail, naming why).
	Images       map[string][]string
	Attestors    map[string]any
	Attestations map[string]string
	Verify       ImageVerification
	// Generator receives what generator.Apply generates (ModeGenerate).
	Generator Generator
	// ConditionsMet says the match conditions were evaluated already
	// (Program.Conditions) and held: Evaluate does not evaluate them again.
	ConditionsMet bool
}

// Outcome is what an evaluation found; the policy kind turns it into a
// result and a message.
type Outcome struct {
	// NotMet is set when a match condition was false: nothing else ran.
	NotMet bool
	// ConditionErr joins the errors of match conditions (none false).
	ConditionErr error
	// Failed is the index of the first validation that did not hold, or
	// -1 when every one held. Evaluation stops there.
	Failed int
	// Err is that validation's error; nil when it evaluated to false.
	Err error
	// HasMessageExpression says the failed validation has one; then
	// Message is its value when MessageErr is nil (MessageErr says why not:
	// an evaluation error, or a value that is not a string).
	HasMessageExpression bool
	Message              string
	MessageErr           error
	// Annotations are the audit annotations with a non-null value;
	// AnnotationErr names the first that could not be evaluated.
	Annotations   map[string]string
	AnnotationErr error
}

// ErrNotString is the MessageErr of a messageExpression whose value is not a string.
var ErrNotString = errors.New("not a string")

// compileFailure is the evaluation error of an expression that did not compile.
type compileFailure struct{ err error }

func (c *compileFailure) Error() string { return "compilation error: " + c.err.Error() }
func (c *compileFailure) Unwrap() error { return c.err }

// IsCompileError reports whether an evaluation error is that of an
// expression that did not compile.
func IsCompileError(err error) bool {
	var c *compileFailure
	return errors.As(err, &c)
}

// errOutOfBudget is the error of an evaluation past the runtime cost budget.
var errOutOfBudget = errors.New("validation failed due to running out of cost budget, no further validation rules will be run")

// Evaluate runs the program on one input: match conditions, then the
// validations in order up to the first that does not hold, then the audit
// annotations. The context's deadline stops long comprehensions.
func (p *Program) Evaluate(ctx context.Context, in *Input) Outcome {
	a := p.activation(ctx, in)
	out := Outcome{Failed: -1}
	if !in.ConditionsMet {
		if out.NotMet, out.ConditionErr = a.conditions(); out.NotMet || out.ConditionErr != nil {
			return out
		}
	}
	for i, val := range p.validations {
		v, err := a.eval(val.check)
		if err == nil && v == types.True {
			continue
		}
		out.Failed, out.Err = i, err
		if err == nil && val.messageExp != nil {
			out.HasMessageExpression = true
			m, err := a.eval(val.messageExp)
			switch {
			case err != nil:
				out.MessageErr = err
			default:
				s, ok := m.Value().(string)
				if !ok {
					out.MessageErr = fmt.Errorf("%w: %v", ErrNotString, m.Type())
				}
				out.Message = s
			}
		}
		break
	}
	if out.Err != nil || len(p.annotations) == 0 {
		return out
	}
	for _, an := range p.annotations {
		v, err := a.eval(an.value)
		if err != nil {
			out.AnnotationErr = fmt.Errorf("failed to evaluate auditAnnotation '%s': %w", an.key, err)
			return out
		}
		if s, ok := v.Value().(string); ok && s != "" {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[an.key] = s
		}
	}
	return out
}

// conditions evaluates the match conditions: notMet when one is false,
// else err joins the errors of those that could not be evaluated.
func (a *activation) conditions() (notMet bool, err error) {
	var condErrs []error
	for _, c := range a.vars.prog.conditions {
		v, err := a.eval(c)
		switch {
		case err != nil:
			condErrs = append(condErrs, err)
		case v != types.True:
			return true, nil
		}
	}
	return false, errors.Join(condErrs...)
}

// Conditions evaluates the match conditions alone (see Outcome's NotMet and
// ConditionErr).
func (p *Program) Conditions(ctx context.Context, in *Input) (notMet bool, err error) {
	return p.activation(ctx, in).conditions()
}

// Extra evaluates the extra expression i (Spec.Extras) to a JSON-shaped
// value.
func (p *Program) Extra(ctx context.Context, in *Input, i int) (any, error) {
	v, err := p.activation(ctx, in).eval(p.extras[i])
	if err != nil {
		return nil, err
	}
	return Native(v)
}

// activation is the variables of one evaluation, with the cost spent so far.
type activation struct {
	ctx                                           context.Context
	object, oldObject, request, namespace, params any
	exceptions                                    any
	images                                        *Input // ModeImage's variables
	variables                                     *varMap
	vars                                          varMap // variables points here: one allocation
	data                                          ClusterData
	generator                                     Generator
	ownNamespace                                  string
	mode                                          Mode
	budget                                        int64
}

func (p *Program) activation(ctx context.Context, in *Input) *activation {
	a := &activation{
		ctx:       ctx,
		object:    in.Object,
		oldObject: in.OldObject,
		request:   in.Request,
		params:    in.Params,
		data:      in.Data,
		generator: in.Generator,
		mode:      p.mode,
		// the namespace a namespaced policy's resource calls may read
		ownNamespace: in.OwnNamespace,
		budget:       celconfig.RuntimeCELCostBudget,
	}
	if in.Namespace != nil {
		a.namespace = in.Namespace
	}
	if p.mode.kyverno() {
		a.exceptions = noExceptions
		if in.AllowedImages != nil || in.AllowedValues != nil {
			a.exceptions = map[string][]string{"allowedImages": nonNil(in.AllowedImages), "allowedValues": nonNil(in.AllowedValues)}
		}
	}
	if p.mode == ModeImage {
		a.images = in
	}
	a.vars = varMap{prog: p, a: a}
	a.variables = &a.vars
	if len(p.variables) > 0 {
		a.variables.vals = make([]ref.Val, len(p.variables))
	}
	return a
}

// noExceptions is `exceptions` when no partial exception applies.
var noExceptions = map[string][]string{"allowedImages": {}, "allowedValues": {}}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// eval runs one expression, charging its cost to the evaluation's budget.
func (a *activation) eval(e *expression) (ref.Val, error) {
	if e.err != nil {
		return nil, &compileFailure{e.err}
	}
	if a.budget < 0 {
		return nil, errOutOfBudget
	}
	// Eval, not ContextEval: ContextEval derives a cancellable context and
	// an interrupt gate for every expression (a fifth of the allocations of
	// a rule evaluation), and the cost limit already bounds how long one
	// expression can run. Cancellation is honoured between expressions.
	if err := a.ctx.Err(); err != nil {
		return nil, err
	}
	v, details, err := e.prog.Eval(a)
	if details != nil {
		if cost := details.ActualCost(); cost != nil {
			if *cost > math.MaxInt64 || int64(*cost) > a.budget {
				a.budget = -1
				return nil, errOutOfBudget
			}
			a.budget -= int64(*cost)
		}
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varObject:
		return a.object, true
	case varOldObject:
		return a.oldObject, true
	case varRequest:
		return a.request, true
	case varNamespace:
		return a.namespace, true
	case varParams:
		return a.params, true
	case varVariables:
		return a.variables, true
	case varExceptions:
		return a.exceptions, a.exceptions != nil
	case varResource:
		return resourceLib{ctx: a.ctx, data: a.data, ownNamespace: a.ownNamespace}, a.mode.kyverno()
	case varGlobalContext:
		g, _ := a.data.(GlobalData)
		return globalLib{typ: globalLibType, ctx: a.ctx, data: g}, a.mode.kyverno()
	case varImage:
		i, _ := a.data.(ImageData)
		return imageLib{typ: imageLibType, ctx: a.ctx, data: i}, a.mode.kyverno()
	case varImages, varAttestors, varAttestations, varVerifier:
		if a.images == nil {
			return nil, false
		}
		return a.imageVariable(name), true
	case varHTTP:
		h, _ := a.data.(HTTPData)
		return httpLib{typ: httpLibType, ctx: a.ctx, data: h}, a.mode.kyverno()
	case varGenerator:
		return generatorLib{typ: generatorLibType, ctx: a.ctx, data: a.generator}, a.mode == ModeGenerate
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// imageVariable is one of ModeImage's variables.
func (a *activation) imageVariable(name string) any {
	in := a.images
	switch name {
	case varImages:
		if in.Images == nil {
			return map[string][]string{}
		}
		return in.Images
	case varAttestors:
		if in.Attestors == nil {
			return map[string]any{}
		}
		return in.Attestors
	case varAttestations:
		if in.Attestations == nil {
			return map[string]string{}
		}
		return in.Attestations
	}
	return imageVerifyLib{typ: imageVerifyLibType, ctx: a.ctx, data: in.Verify}
}
