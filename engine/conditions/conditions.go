package conditions

import (
	"fmt"
	"strings"

	"github.com/tally-dev/tally/engine/variables"
)

// Mode says what the conditions are for. Kyverno resolves variables the
// same way in both (see the package documentation); the mode is kept so that
// callers say what they evaluate and errors can tell.
type Mode int

const (
	// Preconditions must hold for a rule (or a foreach element, or an
	// exception) to apply.
	Preconditions Mode = iota
	// Deny conditions fail the rule when they hold.
	Deny
)

func (m Mode) String() string {
	if m == Deny {
		return "deny conditions"
	}
	return "preconditions"
}

// AnyAll evaluates conditions given as {any: [...], all: [...]}, as a list
// of such groups (all must hold), or as a plain list of conditions (all must
// hold), after substituting their variables from data. A group holds when
// at least one of its "any" conditions holds (an "any" that is present but
// empty never holds) and all of its "all" conditions hold. As in Kyverno,
// a group evaluates its "any" conditions up to the first that holds and its
// "all" conditions up to the first that does not, both blocks whatever the
// other gave (so an error in either is an error); a list stops at its first
// element that does not hold. nil conditions hold.
//
// It returns whether the conditions hold and the messages of the
// conditions that decided it: when they hold, those of the conditions that
// held (what a deny rule reports); when they do not, those of the
// conditions that did not (what "preconditions not met" reports).
func AnyAll(conds any, data map[string]any, mode Mode) (bool, string, error) {
	e := evaluator{subst: variables.NewSubstituter(data, variables.Strict)}
	ok, msg, err := e.block(conds)
	if err != nil {
		return false, "", fmt.Errorf("%s: %w", mode, err)
	}
	return ok, msg, nil
}

type evaluator struct {
	subst *variables.Substituter
}

func (e *evaluator) block(conds any) (bool, string, error) {
	switch c := conds.(type) {
	case nil:
		return true, "", nil
	case []any:
		// A list of conditions or of groups: all must hold. Kyverno joins the
		// messages of those that held with ";" and stops at the first that
		// does not, with its message.
		var held []string
		for _, item := range c {
			ok, msg, err := e.item(item)
			if err != nil {
				return false, "", err
			}
			if !ok {
				return false, msg, nil
			}
			held = appendNonEmpty(held, msg)
		}
		return true, strings.Join(held, ";"), nil
	case map[string]any:
		if isCondition(c) {
			return e.evaluate(c)
		}
		return e.group(c)
	}
	return false, "", fmt.Errorf("conditions must be {any, all} or a list, not %T", conds)
}

// item is one element of a list: a condition or an {any, all} group.
func (e *evaluator) item(item any) (bool, string, error) {
	m, ok := item.(map[string]any)
	if !ok {
		return false, "", fmt.Errorf("a condition must be an object, not %T", item)
	}
	if isCondition(m) {
		return e.evaluate(m)
	}
	return e.group(m)
}

func isCondition(m map[string]any) bool {
	_, hasOp := m["operator"]
	_, hasKey := m["key"]
	return hasOp || hasKey
}

func (e *evaluator) group(m map[string]any) (bool, string, error) {
	rawAny, hasAny := m["any"]
	rawAll, hasAll := m["all"]
	if !hasAny && !hasAll && len(m) > 0 {
		return false, "", fmt.Errorf("conditions have neither any nor all nor a condition: %v", keysOf(m))
	}
	var held, failed []string
	anyHolds, allHold := true, true
	if rawAny != nil {
		list, ok := rawAny.([]any)
		if !ok {
			return false, "", fmt.Errorf("conditions.any must be a list, not %T", rawAny)
		}
		anyHolds = false
		for _, c := range list {
			ok, msg, err := e.item(c)
			if err != nil {
				return false, "", err
			}
			if ok {
				anyHolds = true
				held = appendNonEmpty(held, msg)
				break
			}
			failed = appendNonEmpty(failed, msg)
		}
	}
	if rawAll != nil {
		list, ok := rawAll.([]any)
		if !ok {
			return false, "", fmt.Errorf("conditions.all must be a list, not %T", rawAll)
		}
		for _, c := range list {
			ok, msg, err := e.item(c)
			if err != nil {
				return false, "", err
			}
			if !ok {
				allHold = false
				failed = appendNonEmpty(failed, msg)
				break
			}
			held = appendNonEmpty(held, msg)
		}
	}
	if anyHolds && allHold {
		return true, strings.Join(held, "; "), nil
	}
	return false, strings.Join(failed, "; "), nil
}

func appendNonEmpty(list []string, s string) []string {
	if s == "" {
		return list
	}
	return append(list, s)
}

func (e *evaluator) evaluate(c map[string]any) (bool, string, error) {
	op, _ := c["operator"].(string)
	if op == "" {
		return false, "", fmt.Errorf("condition %v has no operator", c["key"])
	}
	key, err := e.subst.Substitute(c["key"])
	if err != nil {
		return false, "", fmt.Errorf("failed to substitute variables in condition key: %w", err)
	}
	value, err := e.subst.Substitute(c["value"])
	if err != nil {
		return false, "", fmt.Errorf("failed to substitute variables in condition value: %w", err)
	}
	holds, err := Evaluate(key, op, value)
	if err != nil {
		return false, "", err
	}
	// The condition's message is reported whether it held (deny) or not
	// (preconditions).
	msg, _ := c["message"].(string)
	if strings.Contains(msg, "{{") {
		if s, err := e.subst.String(msg); err == nil {
			msg = s
		} // else: a message that cannot be substituted is reported as written
	}
	return holds, msg, nil
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
