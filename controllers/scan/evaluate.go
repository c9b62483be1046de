package scan

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

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
