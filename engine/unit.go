package engine

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/engine/match"
)

// Unit is what a scheduler (the scanner) tracks of a policy: each validate
// rule of a ClusterPolicy or Policy; the whole policy for a CEL policy,
// whose results carry no rule of their own. A unit says which kinds it can
// select and whether it selects a resource, cheaply, before any evaluation.
type Unit struct {
	// Name is the rule's name; "" for a CEL policy.
	Name string
	// Raw is what defines the unit (the rule, or the policy's spec): a
	// change of it changes the unit's results.
	Raw any
	// Kinds are kind selectors ("Pod", "apps/v1/Deployment", "*") of a
	// classic rule's match (match.ParseKind reads them).
	Kinds []string
	// Resources are the resource rules of a CEL policy's match constraints
	// (its autogen variants' included): groups, versions and resources,
	// "*" for any.
	Resources []ResourceRule
	// Err is set for a rule that did not compile: it reports its error
	// wherever its kinds match.
	Err error

	applies func(obj map[string]any, nsLabels map[string]string, gvr schema.GroupVersionResource) bool
}

// ResourceRule is a set of group/version/resource of a CEL policy's
// constraints.
type ResourceRule struct {
	Groups, Versions, Resources []string
}

// Applies reports whether the unit selects a resource in a background scan
// (no admission data). gvr is the resource's group, version and plural when
// known from discovery (CEL policies match by plural); empty, it is guessed
// from the kind. A rule that did not compile applies where its kinds match,
// to report its error.
func (u *Unit) Applies(obj map[string]any, nsLabels map[string]string, gvr schema.GroupVersionResource) bool {
	return u.applies(obj, nsLabels, gvr)
}

// Units lists the policy's units.
func (p *Policy) Units() []Unit {
	switch {
	case p.vpol != nil:
		var rules []ResourceRule
		for _, v := range p.vpol.variants {
			rules = append(rules, resourceRules(v.match)...)
		}
		return []Unit{{Raw: p.vpol.raw(), Resources: rules, applies: func(obj map[string]any, nsLabels map[string]string, gvr schema.GroupVersionResource) bool {
			res := resourceOf(obj, "")
			if gvr.Resource == "" {
				gvr = guessResource(res)
			}
			for _, v := range p.vpol.variants {
				if v.match.matches(&res, gvr, OpCreate, nsLabels) {
					return true
				}
			}
			return false
		}}}
	case p.mpol != nil:
		name, raw := "", any([]any{p.mpol.kind, p.mpol.spec})
		if a := p.mpol.admissionPolicy; a != nil {
			name, raw = a.name, a.raw
		}
		return []Unit{{Name: name, Raw: raw, Resources: resourceRules(p.mpol.match), applies: func(obj map[string]any, nsLabels map[string]string, gvr schema.GroupVersionResource) bool {
			res := resourceOf(obj, "")
			if gvr.Resource == "" {
				gvr = guessResource(res)
			}
			return p.mpol.match.matches(&res, gvr, OpCreate, nsLabels)
		}}}
	case p.vap != nil:
		return []Unit{{Name: p.vap.name, Raw: p.vap.raw, Resources: resourceRules(p.vap.match), applies: func(obj map[string]any, nsLabels map[string]string, gvr schema.GroupVersionResource) bool {
			res := resourceOf(obj, "")
			if gvr.Resource == "" {
				gvr = guessResource(res)
			}
			return p.vap.match.matches(&res, gvr, OpCreate, nsLabels)
		}}}
	}
	out := make([]Unit, 0, len(p.Rules))
	for _, r := range p.Rules {
		out = append(out, Unit{Name: r.Name, Raw: r.Raw, Kinds: match.Kinds(r.Raw.Match), Err: r.Err,
			applies: func(obj map[string]any, nsLabels map[string]string, _ schema.GroupVersionResource) bool {
				return r.Applies(obj, nsLabels)
			}})
	}
	return out
}

// resourceRules are the resource rules a compiled matchConstraints selects.
func resourceRules(c *constraints) []ResourceRule {
	if c == nil {
		return nil
	}
	if len(c.rules) == 0 {
		return []ResourceRule{{Groups: []string{"*"}, Versions: []string{"*"}, Resources: []string{"*"}}}
	}
	out := make([]ResourceRule, 0, len(c.rules))
	for _, r := range c.rules {
		if !createOrAll(r.Operations) {
			continue // a background scan is a CREATE
		}
		out = append(out, ResourceRule{Groups: r.APIGroups, Versions: r.APIVersions, Resources: r.Resources})
	}
	return out
}

func createOrAll(ops []admissionregistrationv1.OperationType) bool {
	for _, o := range ops {
		if o == admissionregistrationv1.Create || o == admissionregistrationv1.OperationAll {
			return true
		}
	}
	return false
}

// guessResource is the plural of a resource's kind, as Kubernetes' REST
// mapper guesses it (offline there is no discovery).
func guessResource(res match.Resource) schema.GroupVersionResource {
	gvr, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind})
	return gvr
}

// BackgroundEnabled reports whether background scans evaluate the policy.
func (p *Policy) BackgroundEnabled() bool {
	switch {
	case p.vpol != nil:
		return p.vpol.spec.BackgroundEnabled() && len(p.vpol.variants) > 0
	case p.mpol != nil:
		return p.mpol.background
	case p.vap != nil:
		return true
	}
	return p.Spec.BackgroundEnabled()
}

// AdmissionEnabled reports whether admission requests are evaluated
// against the policy by tally's webhook. ValidatingAdmissionPolicies are
// not: the API server evaluates them. Nor are MutatingPolicies: tally runs
// no mutating webhook (R44).
func (p *Policy) AdmissionEnabled() bool {
	switch {
	case p.vpol != nil:
		return p.vpol.spec.AdmissionEnabled() && len(p.vpol.variants) > 0
	case p.vap != nil, p.mpol != nil:
		return false
	}
	return p.Spec.AdmissionEnabled()
}

// validationActions are a ValidatingPolicy's (Deny when it names none).
func (v *validatingPolicy) validationActions() []admissionregistrationv1.ValidationAction {
	if len(v.spec.ValidationActions) == 0 {
		return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	return v.spec.ValidationActions
}

// Warns reports whether the policy's failures at admission are returned as
// warnings: a ValidatingPolicy with the Warn action (a ClusterPolicy's
// spec.emitWarning is read by the webhook).
func (p *Policy) Warns() bool {
	return p.vpol != nil && slices.Contains(p.vpol.validationActions(), admissionregistrationv1.Warn)
}

// CEL reports whether the policy is a CEL policy (ValidatingPolicy,
// MutatingPolicy, their namespaced kinds, or ValidatingAdmissionPolicy):
// its results are told apart by source and policy, not by rule.
func (p *Policy) CEL() bool { return p.vpol != nil || p.vap != nil || p.mpol != nil }

// raw is the policy as written, for units: an ImageValidatingPolicy's
// whole spec.
func (v *validatingPolicy) raw() any {
	if v.image != nil {
		return []any{v.kind, v.image.spec}
	}
	return []any{v.kind, v.spec}
}
