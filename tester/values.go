package tester

import "strings"

// valueSource serves a test's values for one resource to the engine.
type valueSource struct {
	spec     *ValuesSpec
	resource string
}

func (v *valueSource) policy(name string) *PolicyValues {
	if v.spec == nil {
		return nil
	}
	_, plain, namespaced := strings.Cut(name, "/")
	for i := range v.spec.Policies {
		p := &v.spec.Policies[i]
		if p.Name == name || (namespaced && p.Name == plain) {
			return p
		}
	}
	return nil
}

// PolicyValues are the global values overlaid with the resource's values.
func (v *valueSource) PolicyValues(policy string) map[string]any {
	if v.spec == nil {
		return nil
	}
	p := v.policy(policy)
	if p == nil {
		return v.spec.GlobalValues
	}
	var own map[string]any
	for _, r := range p.Resources {
		if r.Name == v.resource {
			own = r.Values
		}
	}
	if len(own) == 0 {
		return v.spec.GlobalValues
	}
	out := make(map[string]any, len(v.spec.GlobalValues)+len(own))
	for k, val := range v.spec.GlobalValues {
		out[k] = val
	}
	for k, val := range own {
		out[k] = val
	}
	return out
}

func (v *valueSource) rule(policy, rule string) *RuleValues {
	p := v.policy(policy)
	if p == nil {
		return nil
	}
	// Values given for a rule also serve the rules autogen derives from it.
	base := strings.TrimPrefix(strings.TrimPrefix(rule, "autogen-cronjob-"), "autogen-")
	for i := range p.Rules {
		if p.Rules[i].Name == rule {
			return &p.Rules[i]
		}
	}
	for i := range p.Rules {
		if p.Rules[i].Name == base {
			return &p.Rules[i]
		}
	}
	return nil
}

// RuleValues are the values of a rule.
func (v *valueSource) RuleValues(policy, rule string) map[string]any {
	if r := v.rule(policy, rule); r != nil {
		return r.Values
	}
	return nil
}

// ForeachValues are the per-iteration values of a rule.
func (v *valueSource) ForeachValues(policy, rule string) map[string][]any {
	if r := v.rule(policy, rule); r != nil {
		return r.ForeachValues
	}
	return nil
}
