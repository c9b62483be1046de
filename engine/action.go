package engine

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/wildcard"
)

// Enforced reports whether a failure of the rule blocks a request in the
// namespace (R12): Enforce, where Audit would only report it. In order of
// precedence:
//
//  1. the rule's validate.failureActionOverrides entry that selects the
//     namespace (ClusterPolicy only);
//  2. the rule's validate.failureAction;
//  3. the policy's validationFailureActionOverrides entry that selects the
//     namespace (ClusterPolicy only);
//  4. the policy's validationFailureAction (Audit when unset).
//
// Overrides never apply to cluster-scoped resources (no namespace).
func (p *Policy) Enforced(ruleName, namespace string, nsLabels map[string]string) bool {
	if p.mpol != nil || p.vap != nil {
		return false // never evaluated at admission by tally
	}
	if p.vpol != nil {
		// A ValidatingPolicy denies with the Deny action (its default), for
		// every result alike (R33).
		return slices.Contains(p.vpol.validationActions(), admissionregistrationv1.Deny)
	}
	overridable := p.Namespace == "" && namespace != ""
	if r := p.Rule(ruleName); r != nil && r.images != nil {
		// A verifyImages entry's failureAction, else the policy's.
		for _, e := range r.images.entries {
			if e.FailureAction != "" {
				return kyvernov1.ValidationFailureAction(e.FailureAction).Enforce()
			}
		}
	} else if r != nil && r.Raw.Validate != nil {
		v := r.Raw.Validate
		if overridable {
			if a, ok := override(v.FailureActionOverrides, namespace, nsLabels); ok {
				return a.Enforce()
			}
		}
		if v.FailureAction != nil {
			return v.FailureAction.Enforce()
		}
	}
	if overridable {
		if a, ok := override(p.Spec.ValidationFailureActionOverrides, namespace, nsLabels); ok {
			return a.Enforce()
		}
	}
	return p.Spec.ValidationFailureAction.Enforce()
}

// override finds the first override that selects the namespace: by name
// (wildcards allowed) and by label selector; when an entry has both, both
// must select it.
func override(list []kyvernov1.ValidationFailureActionOverride, namespace string, nsLabels map[string]string) (kyvernov1.ValidationFailureAction, bool) {
	for _, o := range list {
		if o.Action != kyvernov1.Enforce && o.Action != kyvernov1.Audit && o.Action != "enforce" && o.Action != "audit" {
			continue
		}
		if len(o.Namespaces) == 0 && o.NamespaceSelector == nil {
			continue
		}
		if len(o.Namespaces) > 0 && !wildcard.Any(o.Namespaces, namespace) {
			continue
		}
		if o.NamespaceSelector != nil && !selects(o.NamespaceSelector, nsLabels) {
			continue
		}
		return o.Action, true
	}
	return "", false
}

func selects(sel *metav1.LabelSelector, nsLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false // an invalid selector selects nothing
	}
	return s.Matches(labels.Set(nsLabels))
}

// CanEnforce reports whether any rule of the policy may block a request in
// the namespace: a timed-out evaluation of such a policy is answered per its
// failurePolicy.
func (p *Policy) CanEnforce(namespace string, nsLabels map[string]string) bool {
	if p.vpol != nil {
		return p.Enforced("", namespace, nsLabels)
	}
	for _, r := range p.Rules {
		if p.Enforced(r.Name, namespace, nsLabels) {
			return true
		}
	}
	return false
}
