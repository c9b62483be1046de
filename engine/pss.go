package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/tally-dev/tally/engine/podsecurity"
)

// checkPodSecurity evaluates a podSecurity rule. PolicyExceptions with
// podSecurity controls that cover the rule and select the resource add
// their exclusions to the rule's, all together: when that clears every
// failure, the rule is skipped naming them all; otherwise it fails on what is
// left. (An exception without podSecurity controls exempts the whole rule,
// see evaluateRule.)
func (e *evaluation) checkPodSecurity(rule *Rule, data map[string]any) RuleResult {
	kind, _ := e.obj["kind"].(string)
	var pod *podsecurity.Pod
	var err error
	if e.objOverridden {
		pod, err = podsecurity.PodOf(kind, e.obj)
	} else {
		pod, err = e.req.podOf(kind, e.obj)
	}
	if err != nil {
		return e.result(rule, Error, fmt.Sprintf("podSecurity: %v", err))
	}
	res := rule.podSecurity.EvaluatePod(pod)
	if res.Pass {
		return e.result(rule, Pass, "Validation rule '"+rule.Name+"' passed.")
	}
	if xs := e.podSecurityExceptions(rule, data); len(xs) > 0 {
		c, err := withExclusions(rule, xs)
		if err != nil {
			return e.result(rule, Error, err.Error())
		}
		if res = c.EvaluatePod(pod); res.Pass {
			return e.exceptionSkip(rule, xs, " ")
		}
	}
	r := e.result(rule, Fail, "Validation rule '"+rule.Name+"' failed. "+res.Message)
	r.Properties = podSecurityProperties(r.Properties, rule, res.Checks)
	return r
}

// pssControl is one failing control in the controlsJSON property, with the
// field names Kyverno's reports give it.
type pssControl struct {
	ID     string   `json:"ID"`
	Name   string   `json:"Name"`
	Images []string `json:"Images"`
}

// podSecurityProperties adds to a failing podSecurity result the properties
// Kyverno's reports give it: standard and version (as the rule spells them),
// controls (the failing check IDs, comma-joined) and controlsJSON (each
// failing check's ID, control name and the images of the containers it
// names).
func podSecurityProperties(props map[string]string, rule *Rule, fails []podsecurity.CheckFailure) map[string]string {
	if len(fails) == 0 {
		return props
	}
	out := make(map[string]string, len(props)+4)
	maps.Copy(out, props)
	ids := make([]string, len(fails))
	controls := make([]pssControl, len(fails))
	for i, f := range fails {
		ids[i] = f.ID
		controls[i] = pssControl{ID: f.ID, Name: f.Control, Images: f.Images}
	}
	js, err := json.Marshal(controls)
	if err == nil {
		out["controlsJSON"] = string(js)
	} // else: cannot happen for strings
	ps := rule.Raw.Validate.PodSecurity
	out["standard"] = ps.Level
	out["version"] = ps.Version
	out["controls"] = strings.Join(ids, ",")
	return out
}
