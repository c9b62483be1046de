package scan

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/internal/fault"
)

// DefaultEvalTimeout bounds the evaluation of one resource against every
// policy: past it, the rules left are error results (the engine checks its
// ctx between rules and foreach elements), and the worker moves on.
const DefaultEvalTimeout = 10 * time.Second

// panicMessage is the result message of a rule whose evaluation panicked.
// It names nothing of the resource: the log has the stack.
const panicMessage = "evaluation panicked: rule not evaluated (see tally-scanner's log)"

// evaluate runs one policy on a request. A panic in the engine is
// recovered: the policy's rules are then run one at a time, so that the
// rule at fault gets an error result naming it (R25: the other rules keep
// theirs), and the worker goes on with the next policy and resource.
func (s *Scanner) evaluate(ctx context.Context, p *engine.Policy, req *engine.Request) []engine.RuleResult {
	rr, err := evaluateSafely(ctx, p, req)
	if err == nil {
		return rr
	}
	if p.CEL() {
		// A CEL policy is evaluated whole: its one entry is the error.
		s.metrics.evalPanics.Inc()
		logr.FromContextOrDiscard(ctx).Error(err, "evaluation panicked; the policy gets an error result", "policy", p.Name)
		rule := ""
		if units := p.Units(); len(units) == 1 {
			rule = units[0].Name
		}
		return []engine.RuleResult{{Policy: p.Name, Rule: rule, Result: engine.Error, Message: panicMessage, Source: p.Source}}
	}
	var out []engine.RuleResult
	for _, rule := range p.Rules {
		one := *p
		one.Rules = []*engine.Rule{rule}
		rr, err := evaluateSafely(ctx, &one, req)
		if err == nil {
			out = append(out, rr...)
			continue
		}
		if rule.Err == nil && !rule.Applies(req.Object, req.NamespaceLabels) {
			continue // a rule that does not select the resource has no entry, panic or not
		}
		s.metrics.evalPanics.Inc()
		logr.FromContextOrDiscard(ctx).Error(err, "evaluation panicked; the rule gets an error result", "policy", p.Name, "rule", rule.Name)
		out = append(out, engine.RuleResult{Policy: p.Name, Rule: rule.Name, Result: engine.Error, Message: panicMessage})
	}
	return out
}

// evaluateSafely evaluates a policy, turning a panic into an error that
// carries its type and stack (never its value, which may hold content).
func evaluateSafely(ctx context.Context, p *engine.Policy, req *engine.Request) (rr []engine.RuleResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			rr, err = nil, fmt.Errorf("panic (%T) at\n%s", v, debug.Stack())
		}
	}()
	fault.Evaluating(p.Name, req.Object)
	return evaluatePolicy(p, ctx, req), nil
}

// evaluatePolicy is the engine's evaluation; tests replace it.
var evaluatePolicy = (*engine.Policy).Evaluate
