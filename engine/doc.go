// Package engine evaluates Kyverno policies against resources, with
// Kyverno's documented semantics: classic validate and verifyImages rules,
// ValidatingPolicies, ImageValidatingPolicies, MutatingPolicies and the
// Kubernetes admission policies (in the scanner and the CLI), and classic
// mutate and generate rules, GeneratingPolicies and DeletingPolicies (in
// the CLI only). Evaluation itself does no I/O: what a policy reads of
// the cluster or of registries comes through the Request's loaders
// (ContextLoader, cel.ClusterData, ImageVerifier), which the caller
// provides (imageverify/sigverify is the registry client handed in as
// Request.Images); the engine uses client-go types, never a client.
//
// The evaluation of one rule is a chain of checks over inputs gathered once:
// match/exclude (package match), policy exceptions, context entries and
// preconditions (packages variables and conditions), then the validation
// itself: pattern/anyPattern (package pattern), deny conditions, foreach,
// podSecurity (package podsecurity) or cel (celrule.go, with Kubernetes'
// ValidatingAdmissionPolicy semantics). Constructs tally does not evaluate
// (manifests, assert) give an error result that names them; the scanner
// leaves mutate and generate rules out and names them (Policy.LeftOut),
// the CLI applies them (MutateClassic, MutateExisting, GenerateClassic);
// verifyImages rules are evaluated through Request.Images (verifyimages.go).
package engine
