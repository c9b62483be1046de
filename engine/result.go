package engine

import (
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// The result values, as reports spell them.
const (
	Pass  = wgv1alpha2.ResultPass
	Fail  = wgv1alpha2.ResultFail
	Warn  = wgv1alpha2.ResultWarn
	Error = wgv1alpha2.ResultError
	Skip  = wgv1alpha2.ResultSkip
)

// RuleResult is the outcome of one rule of one policy for one resource.
type RuleResult struct {
	// Policy is the policy's report name: "<name>" or "<namespace>/<name>".
	Policy string `json:"policy"`
	// Rule is the rule name (autogen rules carry their autogen- prefix).
	Rule    string            `json:"rule,omitempty"`
	Result  wgv1alpha2.Result `json:"result"`
	Message string            `json:"message,omitempty"`
	// Exceptions names the PolicyExceptions (metadata.name only, as
	// Kyverno's reports list them) that turned the rule into a skip.
	Exceptions []string `json:"exceptions,omitempty"`
	// Properties are the rule's reportProperties (a ValidatingPolicy's:
	// audit annotations, cel.validationIndex, exceptions).
	Properties map[string]string `json:"properties,omitempty"`
	// Source is the report source of a CEL policy's result
	// (KyvernoValidatingPolicy, ValidatingAdmissionPolicy); empty for
	// classic policies (kyverno), whose results are told apart by rule.
	Source string `json:"source,omitempty"`
	// ConditionsNotMet marks the skip of a ValidatingPolicy whose match
	// conditions did not hold: Kyverno's CLI shows it, its reports drop it.
	ConditionsNotMet bool `json:"-"`
}

func passMessage(rule string) string { return "validation rule '" + rule + "' passed." }
