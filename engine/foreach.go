package engine

import (
	"fmt"
	"strconv"

	"github.com/tally-dev/tally/engine/pattern"
	"github.com/tally-dev/tally/engine/variables"
)

// Foreach semantics, as Kyverno documents and applies them:
//   - each declaration's list is evaluated; a list that cannot be evaluated,
//     or is empty or absent, contributes nothing;
//   - an element that is null, whose preconditions do not hold, or whose
//     validation is skipped (anchors, an inner foreach that applied to
//     nothing) does not count;
//   - the first failure decides the rule, its message prefixed with
//     "validation failure: " once per level of nesting; an error decides
//     likewise, but only on the last element of its list (an error on an
//     earlier element is passed over);
//   - when at least one element passed the rule passes ("rule passed");
//     when none applied, the rule has no result at all.

// elementOutcome is what one foreach level concluded.
type elementOutcome int

const (
	noElement      elementOutcome = iota // nothing applied
	elementsPassed                       // at least one element passed, none failed
	elementDecided                       // a failure or an error decides the rule
)

func (e *evaluation) checkForEach(rule *Rule, data map[string]any) (RuleResult, bool) {
	var decided RuleResult
	switch e.forEach(rule, rule.foreach, data, 0, &decided) {
	case elementDecided:
		return decided, true
	case elementsPassed:
		return e.result(rule, Pass, "rule passed"), true
	}
	return RuleResult{}, false
}

// forEach runs a list of foreach declarations at one nesting depth. When it
// returns elementDecided, decided holds the result.
func (e *evaluation) forEach(rule *Rule, list []*forEach, data map[string]any, depth int, decided *RuleResult) elementOutcome {
	var foreachValues map[string][]any
	if e.req.Values != nil && depth == 0 {
		foreachValues = e.req.Values.ForeachValues(e.policy.Name, rule.Name)
	}
	out := noElement
	for _, fe := range list {
		elements, err := e.elements(fe, data)
		if err != nil {
			continue // Kyverno passes over a list it cannot evaluate
		}
		for i, el := range elements {
			if el == nil {
				continue
			}
			if err := e.ctx.Err(); err != nil {
				// Past the deadline: a long list does not hold the caller.
				*decided = e.result(rule, Error, stoppedMessage(err))
				return elementDecided
			}
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
			if _, isMap := el.(map[string]any); !isMap && fe.elementScope != nil && *fe.elementScope {
				// Kyverno fails to put such an element in the context: an
				// error of the foreach itself, without the prefix.
				*decided = e.result(rule, Error, fmt.Sprintf("failed to process foreach: cannot use elementScope=true foreach rules for elements that are not maps, expected type=map got type=%T", el))
				return elementDecided
			}
			r, ok := e.element(rule, fe, d, el, depth)
			if !ok || r.Result == Skip {
				continue
			}
			if r.Result == Pass {
				out = elementsPassed
				continue
			}
			if r.Result == Error && i < len(elements)-1 {
				continue
			}
			r.Message = "validation failure: " + r.Message
			*decided = r
			return elementDecided
		}
	}
	return out
}

// elements evaluates a foreach list expression.
func (e *evaluation) elements(fe *forEach, data map[string]any) ([]any, error) {
	v, err := listOf(fe.list, data)
	if err != nil {
		return nil, fmt.Errorf("foreach list %q: %w", fe.list, err)
	}
	return v, nil
}

// listOf evaluates a foreach list expression (its variables substituted
// first): a list, or a single value as a list of one, or nothing.
func listOf(list string, data map[string]any) ([]any, error) {
	expr, err := variables.SubstituteString(list, data)
	if err != nil {
		return nil, err
	}
	v, err := variables.Query(expr, data)
	if err != nil {
		return nil, err
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

// element validates one element of a foreach: its context, preconditions and
// validation. It reports no result (false) when a nested foreach applied to
// nothing.
func (e *evaluation) element(rule *Rule, fe *forEach, d map[string]any, el any, depth int) (RuleResult, bool) {
	msg := rule.Raw.Validate.Message
	// Patterns apply to the element when it is an object, unless elementScope
	// says otherwise (elementScope: true on other elements is refused by
	// forEach).
	target := any(e.obj)
	_, isMap := el.(map[string]any)
	if (fe.elementScope == nil && isMap) || (fe.elementScope != nil && *fe.elementScope) {
		target = el
	}
	if err := e.loadContext(fe.context, d); err != nil {
		return e.result(rule, Error, "failed to load context: "+err.Error()), true
	}
	if fe.preconditions != nil {
		if r, done := e.preconditions(rule, fe.preconditions, d); done {
			return r, true
		}
	}
	switch {
	case fe.hasDeny:
		return e.checkDeny(rule, msg, d, fe.deny), true
	case fe.pattern != nil:
		pat := fe.pattern
		if fe.patternVars {
			var err error
			if pat, err = variables.Substitute(fe.pattern, d); err != nil {
				return e.result(rule, Error, "variable substitution failed: "+err.Error()), true
			}
		}
		res := pattern.Validate(target, pat)
		switch res.Status {
		case pattern.Pass:
			return e.result(rule, Pass, passMessage(rule.Name)), true
		case pattern.Skip:
			return e.result(rule, Skip, res.Message), true
		}
		return e.result(rule, Fail, failMessage(e.message(msg, d), msg, rule.Name, res.Path)), true
	case fe.anyPattern != nil:
		return e.checkAnyPattern(rule, msg, d, target, fe.anyPattern, fe.patternVars), true
	case fe.nested != nil:
		var decided RuleResult
		switch e.forEach(rule, fe.nested, d, depth+1, &decided) {
		case elementDecided:
			return decided, true
		case elementsPassed:
			return e.result(rule, Pass, "rule passed"), true
		}
		return RuleResult{}, false
	}
	return e.result(rule, Error, "foreach has no validation"), true
}
