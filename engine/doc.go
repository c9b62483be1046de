// Package engine evaluates Kyverno validate rules against resources, with
// Kyverno's documented semantics. It is pure: policies, resources and request
// data in, results out; no client-go, no I/O.
//
// The evaluation of one rule is a chain of checks over inputs gathered once:
// match/exclude (package match), policy exceptions, context entries and
// preconditions (packages variables and conditions), then the validation
// itself: pattern/anyPattern (package pattern), deny conditions, foreach,
// podSecurity (package podsecurity) or cel (celrule.go, with Kubernetes'
// ValidatingAdmissionPolicy semantics). Constructs tally does not evaluate
// (manifests, assert) give an error result that names them; mutate and
// generate rules are left out and named (Policy.LeftOut); verifyImages rules
// are evaluated through Request.Images (verifyimages.go).
package engine
