package engine

import (
	"fmt"
	"strconv"

	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/pattern"
	"github.com/tally-dev/tally/engine/variables"
)

// forEachOutcome folds the outcomes of the elements of a foreach: the first
// failure or error decides; else a pass if any element passed; else a skip.
type forEachOutcome struct {
	result  RuleResult
	decided bool // a fail or error was found
	passed  int
	skipped int
}

func (e *evaluation) checkForEach(rule *Rule, data map[string]any) RuleResult {
	var out forEachOutcome
	e.forEach(rule, rule.foreach, data, 0, &out)
	switch {
	case out.decided:
		return out.result
	case out.passed > 0:
		return e.result(rule, Pass, passMessage(rule.Name))
	default:
		return e.result(rule, Skip, "rule "+rule.Name+" skipped: no element applied")
	}
}

func (e *evaluation) forEach(rule *Rule, list []*forEach, data map[string]any, depth int, out *forEachOutcome) {
	var foreachValues map[string][]any
	if e.req.Values != nil && depth == 0 {
		foreachValues = e.req.Values.ForeachValues(e.policy.Name, rule.Name)
	}
	for _, fe := range list {
		elements, err := e.elements(fe, data)
		if err != nil {
			out.result, out.decided = e.result(rule, Error, err.Error()), true
			return
		}
		for i, el := range elements {
			d := cloneTop(data)
			d["element"] = el
			d["elementIndex"] = i
			d["element"+strconv.Itoa(depth)] = el
			d["elementIndex"+strconv.Itoa(depth)] = i
			for k, vals := range foreachValues {
				if i < len(vals) {
					setPath(d, k, vals[i])
				}
			}
			if err := e.loadContext(fe.context, d); err != nil {
				out.result, out.decided = e.result(rule, Error, err.Error()), true
				return
			}
			if fe.preconditions != nil {
				ok, _, err := conditions.AnyAll(fe.preconditions, d, conditions.Preconditions)
				if err != nil {
					out.result, out.decided = e.result(rule, Error, fmt.Sprintf("foreach preconditions: %v", err)), true
					return
				}
				if !ok {
					out.skipped++
					continue
				}
			}
			if e.element(rule, fe, d, el, depth, out); out.decided {
				return
			}
		}
	}
}

// elements evaluates a foreach list expression.
func (e *evaluation) elements(fe *forEach, data map[string]any) ([]any, error) {
	expr, err := variables.SubstituteString(fe.list, data)
	if err != nil {
		return nil, fmt.Errorf("foreach list %q: %w", fe.list, err)
	}
	v, err := variables.Query(expr, data)
	if err != nil {
		return nil, fmt.Errorf("foreach list %q: %w", fe.list, err)
	}
	switch v := v.(type) {
	case nil:
		return nil, nil
	case []any:
		return v, nil
	default:
		return []any{v}, nil
	}
}

// element validates one element of a foreach.
func (e *evaluation) element(rule *Rule, fe *forEach, d map[string]any, el any, depth int, out *forEachOutcome) {
	msg := rule.Raw.Validate.Message
	// Patterns apply to the element when it is an object, unless elementScope
	// says otherwise; elementScope: true needs object elements.
	target := any(e.obj)
	_, isMap := el.(map[string]any)
	if fe.elementScope != nil && *fe.elementScope && !isMap {
		out.result, out.decided = e.result(rule, Error, fmt.Sprintf("foreach: elementScope is true but element %d is not an object", depth)), true
		return
	}
	if (fe.elementScope == nil && isMap) || (fe.elementScope != nil && *fe.elementScope) {
		target = el
	}
	var r RuleResult
	switch {
	case fe.nested != nil:
		e.forEach(rule, fe.nested, d, depth+1, out)
		return
	case fe.pattern != nil:
		pat := fe.pattern
		if fe.patternVars {
			var err error
			if pat, err = variables.Substitute(fe.pattern, d); err != nil {
				r = e.result(rule, Error, fmt.Sprintf("variable substitution failed for rule %s: %v", rule.Name, err))
				break
			}
		}
		res := pattern.Validate(target, pat)
		switch res.Status {
		case pattern.Pass:
			out.passed++
			return
		case pattern.Skip:
			out.skipped++
			return
		}
		r = e.result(rule, Fail, failMessage(e.message(msg, d), rule.Name, res.Path))
	case fe.anyPattern != nil:
		r = e.checkAnyPattern(rule, msg, d, target, fe.anyPattern, fe.patternVars)
	case fe.hasDeny:
		r = e.checkDeny(rule, msg, d, fe.deny)
	default:
		r = e.result(rule, Error, "foreach has no validation")
	}
	switch r.Result {
	case Pass:
		out.passed++
	case Skip:
		out.skipped++
	default:
		out.result, out.decided = r, true
	}
}
