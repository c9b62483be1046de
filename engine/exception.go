package engine

import (
	"encoding/json"
	"fmt"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/match"
	"github.com/tally-dev/tally/engine/wildcard"
)

// Exception is a compiled PolicyException.
type Exception struct {
	// Name is "<namespace>/<name>".
	Name       string
	Spec       kyvernov2.PolicyExceptionSpec
	matcher    *match.Matcher
	conditions any
}

// CompileException compiles a PolicyException.
func CompileException(pe *kyvernov2.PolicyException) (*Exception, error) {
	ex := &Exception{Name: pe.Namespace + "/" + pe.Name, Spec: pe.Spec}
	if pe.Namespace == "" {
		ex.Name = pe.Name
	}
	if pe.Spec.Conditions != nil {
		data, err := json.Marshal(pe.Spec.Conditions)
		if err != nil {
			return nil, fmt.Errorf("exception %s: conditions: %w", ex.Name, err)
		}
		if err := json.Unmarshal(data, &ex.conditions); err != nil {
			return nil, fmt.Errorf("exception %s: conditions: %w", ex.Name, err)
		}
	}
	var err error
	if ex.matcher, err = match.Compile(pe.Spec.Match, nil); err != nil {
		return nil, fmt.Errorf("exception %s: %w", ex.Name, err)
	}
	if len(pe.Spec.Exceptions) == 0 {
		return nil, fmt.Errorf("exception %s: spec.exceptions is empty", ex.Name)
	}
	return ex, nil
}

// Covers reports whether the exception names the policy and rule. Policy and
// rule names may use wildcards.
func (x *Exception) Covers(policy, rule string) bool {
	for _, e := range x.Spec.Exceptions {
		if !wildcard.Match(e.PolicyName, policy) {
			continue
		}
		for _, r := range e.RuleNames {
			if wildcard.Match(r, rule) {
				return true
			}
		}
	}
	return false
}

// exceptionsFor returns the names of the exceptions that exempt the subject
// from the rule.
func (e *evaluation) exceptionsFor(rule *Rule, data map[string]any) []string {
	var names []string
	for _, x := range e.req.Exceptions {
		if e.req.Background && !x.Spec.BackgroundEnabled() {
			continue
		}
		if !x.Covers(e.policy.Name, rule.Name) {
			continue
		}
		if len(x.Spec.PodSecurity) > 0 && rule.podSecurity != nil {
			continue // applied as extra exclusions of the podSecurity check
		}
		if !x.matcher.Matches(&e.res, e.req.NamespaceLabels, e.adm) {
			continue
		}
		if x.conditions != nil {
			ok, _, err := conditions.AnyAll(x.conditions, data, conditions.Preconditions)
			if err != nil || !ok {
				continue
			}
		}
		names = append(names, x.Name)
	}
	return names
}
