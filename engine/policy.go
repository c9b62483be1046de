package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/match"
	"github.com/tally-dev/tally/engine/podsecurity"
	"github.com/tally-dev/tally/engine/variables"
)

// Annotations a policy may carry that change its results.
const (
	AnnotationScored   = "policies.kyverno.io/scored"
	AnnotationCategory = "policies.kyverno.io/category"
	AnnotationSeverity = "policies.kyverno.io/severity"
)

// Policy is a compiled ClusterPolicy or Policy: its validate rules, autogen
// rules included, parsed once. A Policy is immutable once compiled and safe
// for concurrent use.
type Policy struct {
	// Name is the report name: the ClusterPolicy's name, or "<namespace>/<name>".
	Name string
	// Namespace is empty for a ClusterPolicy.
	Namespace   string
	Annotations map[string]string
	Spec        kyvernov1.Spec
	// Rules are the validate and verifyImages rules, followed by the
	// generated autogen rules.
	Rules []*Rule
	// Scored is false when the policy is annotated policies.kyverno.io/scored: "false".
	Scored   bool
	Category string
	Severity string
	// Kind is ClusterPolicy, Policy, ValidatingPolicy or NamespacedValidatingPolicy.
	Kind string
	// Source is the results' source: kyverno, or KyvernoValidatingPolicy.
	Source string
	// LeftOut are the rules of the policy tally does not evaluate (mutate,
	// generate), in the policy's order (R46).
	LeftOut []LeftOutRule
	// imageRules are the policy's verifyImages rules as written: tally
	// evaluates them, and beside Kyverno its webhook reports them from
	// another handler than its validate rules' (ControllerRules).
	imageRules []LeftOutRule

	// vpol is set for ValidatingPolicies, vap for ValidatingAdmissionPolicies:
	// neither has rules of its own.
	vpol *validatingPolicy
	vap  *vap
	mpol *mutatingPolicy
	gpol *celGenerator
	// deleting marks a DeletingPolicy (evaluated through vpol).
	deleting bool
	// mutateRules are the classic mutate rules (autogen included), applied
	// by the CLI only (MutateClassic).
	mutateRules []*Rule
	// generateRules are the classic generate rules, applied by the CLI
	// only (GenerateClassic).
	generateRules []*Rule
}

// Rule is a compiled validate rule. A rule that could not be compiled keeps
// its error and yields error results, so that one broken rule never hides
// the others.
type Rule struct {
	Name string
	Raw  kyvernov1.Rule
	// Err is set when the rule cannot be evaluated; every result of the rule is an error naming it.
	Err error

	matcher       *match.Matcher
	preconditions any
	pattern       any
	anyPattern    []any
	// patternVars says whether pattern or anyPattern hold variables; without
	// them they are used as they are, never copied.
	patternVars bool
	deny        any
	hasDeny     bool
	foreach     []*forEach
	podSecurity *podsecurity.Compiled
	cel         *celRule
	images      *imagesRule
	mutate      *mutation
	generate    *generation
	// propertyVars says whether reportProperties values hold variables.
	propertyVars bool
}

type forEach struct {
	list          string
	elementScope  *bool
	context       []kyvernov1.ContextEntry
	preconditions any
	pattern       any
	anyPattern    []any
	patternVars   bool
	deny          any
	hasDeny       bool
	nested        []*forEach
}

// CompileClusterPolicy compiles a ClusterPolicy.
func CompileClusterPolicy(p *kyvernov1.ClusterPolicy) (*Policy, error) {
	return compile("ClusterPolicy", p.Name, "", p.Annotations, p.Spec)
}

// CompilePolicy compiles a namespaced Policy.
func CompilePolicy(p *kyvernov1.Policy) (*Policy, error) {
	return compile("Policy", p.Namespace+"/"+p.Name, p.Namespace, p.Annotations, p.Spec)
}

func compile(kind, name, namespace string, annotations map[string]string, spec kyvernov1.Spec) (*Policy, error) {
	p := &Policy{
		Kind:        kind,
		Source:      SourceKyverno,
		Name:        name,
		Namespace:   namespace,
		Annotations: annotations,
		Spec:        spec,
		Scored:      annotations[AnnotationScored] != "false",
		Category:    annotations[AnnotationCategory],
		Severity:    annotations[AnnotationSeverity],
	}
	rules, err := match.Autogen(annotations, spec.Rules)
	if err != nil {
		return nil, fmt.Errorf("policy %s: autogen: %w", name, err)
	}
	for i := range rules {
		if rules[i].Mutate != nil && rules[i].Validate == nil && rules[i].VerifyImages == nil {
			p.mutateRules = append(p.mutateRules, compileMutateRule(rules[i]))
			continue
		}
		if rules[i].Generate != nil && rules[i].Validate == nil && rules[i].VerifyImages == nil {
			p.generateRules = append(p.generateRules, compileGenerateRule(rules[i]))
			continue
		}
		if rules[i].Validate == nil && rules[i].VerifyImages == nil {
			continue
		}
		p.Rules = append(p.Rules, compileRule(rules[i]))
	}
	for _, r := range spec.Rules {
		if r.Validate == nil {
			lr := LeftOutRule{Name: r.Name, Type: ruleType(r), Raw: r}
			lr.matcher, _ = match.Compile(r.Match, r.Exclude) // one that does not compile applies nowhere
			if r.VerifyImages != nil {
				p.imageRules = append(p.imageRules, lr)
			} else {
				p.LeftOut = append(p.LeftOut, lr)
			}
		}
	}
	return p, nil
}

// LeftOutRule is a rule tally does not evaluate, or one Kyverno reports
// from another handler (ControllerRules), and its type.
type LeftOutRule struct {
	Name string
	// Type is mutate, generate or verifyImages.
	Type string
	// Raw is the rule as written.
	Raw kyvernov1.Rule

	matcher *match.Matcher
}

// ControllerRules are the rules Kyverno reports from other handlers than
// its validate rules': mutate and generate (left out by tally) and
// verifyImages, as written (no autogen rules).
func (p *Policy) ControllerRules() []LeftOutRule {
	return append(slices.Clone(p.LeftOut), p.imageRules...)
}

// NotEvaluatedNote is what tally says of the rules it leaves out (R46).
const NotEvaluatedNote = "reported by Kyverno's controllers beside Kyverno; not evaluated by tally"

func ruleType(r kyvernov1.Rule) string {
	switch {
	case r.VerifyImages != nil:
		return "verifyImages"
	case r.Mutate != nil:
		return "mutate"
	case r.Generate != nil:
		return "generate"
	}
	return "unknown"
}

// LeftOutOf finds the rule an expectation or a result names among the
// rules left out, autogen names included.
func (p *Policy) LeftOutOf(name string) (LeftOutRule, bool) {
	if p == nil {
		return LeftOutRule{}, false
	}
	for _, r := range p.LeftOut {
		if RuleNamed(name, r.Name) {
			return r, true
		}
	}
	return LeftOutRule{}, false
}

// EvaluatesNothing says that every rule of the policy is left out.
func (p *Policy) EvaluatesNothing() bool {
	return p != nil && p.vpol == nil && p.vap == nil && p.mpol == nil && len(p.Rules) == 0 && len(p.LeftOut) > 0
}

// DescribeLeftOut names the rules left out: "rules a (verifyImages), b
// (mutate)", or "rule a (verifyImages)".
func DescribeLeftOut(rules []LeftOutRule) string {
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = fmt.Sprintf("%s (%s)", r.Name, r.Type)
	}
	word := "rules "
	if len(rules) == 1 {
		word = "rule "
	}
	return word + strings.Join(parts, ", ")
}

func compileRule(raw kyvernov1.Rule) *Rule {
	r := &Rule{Name: raw.Name, Raw: raw}
	for _, v := range raw.ReportProperties {
		r.propertyVars = r.propertyVars || strings.Contains(v, "{{")
	}
	if err := r.compile(); err != nil {
		r.Err = fmt.Errorf("rule %s: %w", raw.Name, err)
	}
	return r
}

func (r *Rule) compile() error {
	v := r.Raw.Validate
	var err error
	if r.matcher, err = match.Compile(r.Raw.Match, r.Raw.Exclude); err != nil {
		return err
	}
	if r.preconditions, err = decode(r.Raw.Preconditions, "preconditions"); err != nil {
		return err
	}
	if v == nil {
		return r.compileImages()
	}
	switch {
	case v.CEL != nil:
		return r.compileCEL()
	case v.Manifests != nil:
		return fmt.Errorf("validate.manifests is not supported")
	case v.Assert != nil:
		return fmt.Errorf("validate.assert is not supported")
	}
	set := 0
	if v.Pattern != nil {
		set++
		if r.pattern, err = decode(v.Pattern, "validate.pattern"); err != nil {
			return err
		}
	}
	if v.AnyPattern != nil {
		set++
		if r.anyPattern, err = decodeList(v.AnyPattern, "validate.anyPattern"); err != nil {
			return err
		}
	}
	if v.Deny != nil {
		set++
		r.hasDeny = true
		if r.deny, err = decode(v.Deny.Conditions, "validate.deny.conditions"); err != nil {
			return err
		}
	}
	if len(v.ForEach) > 0 {
		set++
		if r.foreach, err = compileForEach(v.ForEach); err != nil {
			return err
		}
	}
	if v.PodSecurity != nil {
		set++
		if r.podSecurity, err = podsecurity.Compile(*v.PodSecurity); err != nil {
			return fmt.Errorf("validate.podSecurity: %w", err)
		}
	}
	if set != 1 {
		return fmt.Errorf("a validate rule needs exactly one of pattern, anyPattern, deny, foreach, podSecurity (found %d)", set)
	}
	r.patternVars = variables.HasVariables(r.pattern) || variables.HasVariables(any(r.anyPattern))
	return r.checkVariables()
}

// checkVariables rejects a rule with a variable whose JMESPath does not
// parse: it could only ever give error results.
func (r *Rule) checkVariables() error {
	var parts []any
	for _, raw := range []any{r.Raw.Validate, r.Raw.VerifyImages, r.Raw.Preconditions, r.Raw.Context} {
		data, err := json.Marshal(raw)
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		parts = append(parts, v)
	}
	return variables.CheckSyntax(parts)
}

func compileForEach(list []kyvernov1.ForEachValidation) ([]*forEach, error) {
	out := make([]*forEach, 0, len(list))
	for i := range list {
		fe := &list[i]
		c := &forEach{list: fe.List, elementScope: fe.ElementScope, context: fe.Context}
		var err error
		if c.preconditions, err = decode(fe.Preconditions, "foreach.preconditions"); err != nil {
			return nil, err
		}
		if c.pattern, err = decode(fe.Pattern, "foreach.pattern"); err != nil {
			return nil, err
		}
		if fe.AnyPattern != nil {
			if c.anyPattern, err = decodeList(fe.AnyPattern, "foreach.anyPattern"); err != nil {
				return nil, err
			}
		}
		if fe.Deny != nil {
			c.hasDeny = true
			if c.deny, err = decode(fe.Deny.Conditions, "foreach.deny.conditions"); err != nil {
				return nil, err
			}
		}
		if fe.ForEach != nil {
			var nested []kyvernov1.ForEachValidation
			if err := json.Unmarshal(fe.ForEach.Raw, &nested); err != nil {
				return nil, fmt.Errorf("foreach.foreach: %w", err)
			}
			if c.nested, err = compileForEach(nested); err != nil {
				return nil, err
			}
		}
		c.patternVars = variables.HasVariables(c.pattern) || variables.HasVariables(any(c.anyPattern))
		if strings.TrimSpace(c.list) == "" {
			return nil, fmt.Errorf("foreach[%d]: list is required", i)
		}
		out = append(out, c)
	}
	return out, nil
}

func decode(j *apiextv1.JSON, what string) (any, error) {
	if j == nil || len(j.Raw) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(j.Raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

func decodeList(j *apiextv1.JSON, what string) ([]any, error) {
	v, err := decode(j, what)
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s must be a list", what)
	}
	return list, nil
}

// HasRule reports whether the policy has a validate rule of that name, or
// one autogen derived from it.
func (p *Policy) HasRule(name string) bool {
	if p.vpol != nil || p.vap != nil || p.mpol != nil {
		return true // results of CEL policies have no rule to tell apart
	}
	for _, r := range p.Rules {
		if RuleNamed(r.Name, name) {
			return true
		}
	}
	return false
}

// RuleNamed says whether a rule (or a result's rule) is the rule a policy
// author named, or one autogen derived from it.
func RuleNamed(rule, name string) bool {
	return rule == name || rule == "autogen-"+name || rule == "autogen-cronjob-"+name
}

// Applies reports whether the rule's match/exclude selects a resource in a
// background scan (no admission data). Rules that did not compile apply
// nowhere.
func (r *Rule) Applies(obj map[string]any, nsLabels map[string]string) bool {
	if r.matcher == nil {
		return false
	}
	res := resourceOf(obj, "")
	return r.matcher.Matches(&res, nsLabels, nil)
}

// Rule returns a validate rule by name (nil if absent).
func (p *Policy) Rule(name string) *Rule {
	for _, r := range p.Rules {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// VerifiesImages says whether the rule is a verifyImages rule.
func (r *Rule) VerifiesImages() bool { return r.images != nil }
