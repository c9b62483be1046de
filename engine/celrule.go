package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/tally-dev/tally/engine/cel"
)

// celValidation is a rule's validate.cel: a ValidatingAdmissionPolicy's
// validations inside a classic rule.
type celValidation struct {
	Expressions      []admissionregistrationv1.Validation      `json:"expressions,omitempty"`
	ParamKind        *admissionregistrationv1.ParamKind        `json:"paramKind,omitempty"`
	ParamRef         *admissionregistrationv1.ParamRef         `json:"paramRef,omitempty"`
	AuditAnnotations []admissionregistrationv1.AuditAnnotation `json:"auditAnnotations,omitempty"`
	Variables        []admissionregistrationv1.Variable        `json:"variables,omitempty"`
	Generate         *bool                                     `json:"generate,omitempty"`
}

// celRule is a compiled validate.cel.
type celRule struct {
	prog *cel.Program
	// params says the rule reads params (paramKind and paramRef).
	params bool
}

// compileCEL compiles a rule's validate.cel with its celPreconditions in
// Kubernetes' environment. As in Kyverno, an expression that does not
// compile does not refuse the policy: it fails the resources the rule
// applies to, with the compiler's message.
func (r *Rule) compileCEL() error {
	var v celValidation
	if err := json.Unmarshal(r.Raw.Validate.CEL.Raw, &v); err != nil {
		return fmt.Errorf("validate.cel: %w", err)
	}
	if len(v.Expressions) == 0 {
		return errors.New("validate.cel: expressions are required")
	}
	c := &celRule{params: v.ParamKind != nil && v.ParamRef != nil}
	prog, err := cel.Compile(cel.Spec{
		Mode:            cel.ModeKubernetes,
		HasParams:       c.params,
		Variables:       v.Variables,
		MatchConditions: r.Raw.CELPreconditions,
		Validations:     v.Expressions,
	})
	if prog == nil {
		return err
	}
	c.prog = prog
	r.cel = c
	return nil
}

// checkCEL evaluates a validate.cel rule as Kyverno does, through
// Kubernetes' validator with failurePolicy Fail: preconditions not met skip
// the rule; an expression that errs fails it with the error; the first
// expression that is false fails it with its message.
func (e *evaluation) checkCEL(rule *Rule) RuleResult {
	c := rule.cel
	if c.params {
		return e.result(rule, Error, "error in parameterized resource: tally does not load params for validate.cel yet")
	}
	in := e.req.celInput()
	if e.objOverridden {
		// Values replaced parts of the object: evaluate what they produced.
		copied := *in
		copied.Object = cel.Shared(cel.Normalize(e.obj))
		in = &copied
	}
	out := c.prog.Evaluate(e.ctx, in)
	switch {
	case out.NotMet:
		return e.result(rule, Skip, "cel preconditions not met")
	case out.ConditionErr != nil:
		return e.result(rule, Fail, out.ConditionErr.Error())
	case out.Failed < 0:
		return e.result(rule, Pass, "Validation rule '"+rule.Name+"' passed.")
	case out.Err != nil:
		return e.result(rule, Fail, celErrorMessage(c.prog.Expression(out.Failed), out.Err))
	}
	return e.result(rule, Fail, celFailMessage(c.prog, out, rule.Raw.Validate.Message))
}

// celErrorMessage is the API server's message for an expression that could
// not be evaluated.
func celErrorMessage(expr string, err error) string {
	if cel.IsCompileError(err) {
		return err.Error()
	}
	return fmt.Sprintf("expression '%v' resulted in error: %v", expr, err)
}

// celFailMessage is the message of a false validation, chosen as the API
// server chooses it: the messageExpression's value (trimmed, unless empty,
// not a string, multi-line or too long), else the validation's message
// (the rule's validate.message when it has none), else the expression.
func celFailMessage(p *cel.Program, out cel.Outcome, ruleMessage string) string {
	if out.HasMessageExpression && out.MessageErr == nil {
		m := strings.TrimSpace(out.Message)
		if m != "" && len(m) <= celconfig.MaxEvaluatedMessageExpressionSizeBytes && !strings.Contains(m, "\n") {
			return m
		}
	}
	m := p.Message(out.Failed)
	if m == "" {
		m = ruleMessage
	}
	if m = strings.TrimSpace(m); m != "" {
		return m
	}
	return "failed expression: " + strings.TrimSpace(p.Expression(out.Failed))
}
