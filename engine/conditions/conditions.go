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
// empty never holds) and all of its "all" conditions hold; evaluation stops
// at the first condition that decides. nil conditions hold.
//
// It returns whether the conditions hold and, when they do not, the
// messages of the conditions that failed, joined with "; ".
func AnyAll(conds any, data map[string]any, mode Mode) (bool, string, error) {
	e := evaluator{subst: variables.NewSubstituter(data, variables.Strict)}
	ok, err := e.block(conds)
	if err != nil {
		return false, "", fmt.Errorf("%s: %w", mode, err)
	}
	if ok {
		return true, "", nil
	}
	return false, strings.Join(e.messages, "; "), nil
}

type evaluator struct {
	subst    *variables.Substituter
	messages []string
}

func (e *evaluator) block(conds any) (bool, error) {
	switch c := conds.(type) {
	case nil:
		return true, nil
	case []any:
		for _, item := range c {
			ok, err := e.item(item)
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case map[string]any:
		if isCondition(c) {
			return e.one(c)
		}
		return e.group(c)
	}
	return false, fmt.Errorf("conditions must be {any, all} or a list, not %T", conds)
}

// item is one element of a list: a condition or an {any, all} group.
func (e *evaluator) item(item any) (bool, error) {
	m, ok := item.(map[string]any)
	if !ok {
		return false, fmt.Errorf("a condition must be an object, not %T", item)
	}
	if isCondition(m) {
		return e.one(m)
	}
	return e.group(m)
}

func isCondition(m map[string]any) bool {
	_, hasOp := m["operator"]
	_, hasKey := m["key"]
	return hasOp || hasKey
}

func (e *evaluator) group(m map[string]any) (bool, error) {
	rawAny, hasAny := m["any"]
	rawAll, hasAll := m["all"]
	if !hasAny && !hasAll && len(m) > 0 {
		return false, fmt.Errorf("conditions have neither any nor all nor a condition: %v", keysOf(m))
	}
	if raw, present := rawAny, hasAny; present && raw != nil {
		list, ok := raw.([]any)
		if !ok {
			return false, fmt.Errorf("conditions.any must be a list, not %T", raw)
		}
		held := false
		var failed []string
		for _, c := range list {
			ok, msg, err := e.oneWithMessage(c)
			if err != nil {
				return false, err
			}
			if ok {
				held = true
				break
			}
			if msg != "" {
				failed = append(failed, msg)
			}
		}
		if !held {
			e.messages = append(e.messages, failed...)
			return false, nil
		}
	}
	if raw, present := rawAll, hasAll; present && raw != nil {
		list, ok := raw.([]any)
		if !ok {
			return false, fmt.Errorf("conditions.all must be a list, not %T", raw)
		}
		for _, c := range list {
			ok, err := e.item(c)
			if err != nil || !ok {
				return false, err
			}
		}
	}
	return true, nil
}

// one evaluates a condition, recording its message when it fails.
func (e *evaluator) one(c map[string]any) (bool, error) {
	ok, msg, err := e.evaluate(c)
	if err == nil && !ok && msg != "" {
		e.messages = append(e.messages, msg)
	}
	return ok, err
}

func (e *evaluator) oneWithMessage(c any) (bool, string, error) {
	m, ok := c.(map[string]any)
	if !ok {
		return false, "", fmt.Errorf("a condition must be an object, not %T", c)
	}
	if !isCondition(m) {
		ok, err := e.group(m)
		return ok, "", err
	}
	return e.evaluate(m)
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
	if err != nil || holds {
		return holds, "", err
	}
	msg, _ := c["message"].(string)
	if strings.Contains(msg, "{{") {
		if s, err := e.subst.String(msg); err == nil {
			msg = s
		} // else: a message that cannot be substituted is reported as written
	}
	return false, msg, nil
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
