package admission

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"

	"github.com/tally-dev/tally/engine/match"
	"github.com/tally-dev/tally/engine/wildcard"
)

// Webhook rules from the policies.
//
// The webhook configuration sends tally only the requests its
// admission-enabled policies can act on: CREATE and UPDATE of the kinds (and
// subresources) their rules match, in every group serving the kind, plus
// kyverno.io ClusterPolicies and Policies, which the webhook checks before
// they are stored. A kind no policy matches is never sent (Secrets only if a
// policy matches Secrets; Leases, Events and status updates not at all),
// which spares the API server a call per request and tally a view of
// objects it has no business seeing. A policy matching every kind ("*")
// gets every kind.

// policyRule sends policy writes to the webhook, which refuses a policy that
// cannot be evaluated.
var policyRule = admissionregistrationv1.RuleWithOperations{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
	Rule: admissionregistrationv1.Rule{APIGroups: []string{"kyverno.io"}, APIVersions: []string{"*"},
		Resources: []string{"clusterpolicies", "policies"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
}

// kindsOf lists the kinds the policies' rules can match (autogen rules
// included), as written.
func kindsOf(policies []*admissionPolicy) []string {
	seen := map[string]bool{}
	for _, ap := range policies {
		for _, r := range ap.compiled.Rules {
			for _, k := range match.Kinds(r.Raw.Match) {
				seen[k] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// webhookRules maps kinds to the webhook's rules through discovery. A kind
// not served (yet) is left out and returned in missing; it is looked for
// again at the next pass.
func webhookRules(kinds []string, disc discovery.DiscoveryInterface) (rules []admissionregistrationv1.RuleWithOperations, missing []string, err error) {
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	all := func() []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*", "*/*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)}}}
	}
	var selectors []match.KindSelector
	var written []string // the kinds of selectors, as written
	for _, k := range kinds {
		sel, err := match.ParseKind(k)
		if err != nil {
			continue // the policy is refused for it; nothing to send
		}
		if sel.Kind == "*" && sel.Group == "*" {
			return all(), nil, nil
		}
		selectors, written = append(selectors, sel), append(written, k)
	}
	found := make([]bool, len(selectors))
	byGroup := map[string]map[string]bool{}
	if len(selectors) > 0 {
		_, lists, err := disc.ServerGroupsAndResources()
		if err != nil && len(lists) == 0 {
			return nil, nil, fmt.Errorf("discovery: %w", err)
		}
		for _, list := range lists {
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				continue
			}
			kindOf := map[string]string{} // resource -> kind
			for _, r := range list.APIResources {
				if !strings.Contains(r.Name, "/") {
					kindOf[r.Name] = r.Kind
				}
			}
			for _, r := range list.APIResources {
				parent, sub, isSub := strings.Cut(r.Name, "/")
				for i, sel := range selectors {
					if (sel.Group != "*" && sel.Group != gv.Group) || (sel.Version != "*" && sel.Version != gv.Version) {
						continue
					}
					if !wildcardMatch(sel.Kind, kindOf[parent]) {
						continue
					}
					if isSub && sel.Subresource != "*" && sel.Subresource != sub {
						continue
					}
					if !isSub && sel.Subresource != "" && sel.Subresource != "*" {
						continue
					}
					found[i] = true
					if byGroup[gv.Group] == nil {
						byGroup[gv.Group] = map[string]bool{}
					}
					byGroup[gv.Group][r.Name] = true
				}
			}
		}
	}
	for i := range selectors {
		if !found[i] {
			missing = append(missing, written[i])
		}
	}
	for _, group := range slices.Sorted(maps.Keys(byGroup)) {
		rules = append(rules, admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: slices.Sorted(maps.Keys(byGroup[group])),
			Scope: ptr.To(admissionregistrationv1.AllScopes)}})
	}
	return append(rules, policyRule), missing, nil
}

// celRules are the webhook rules of the CEL policies: their resource rules
// as written (groups, versions, resources), for CREATE and UPDATE.
func celRules(policies []*admissionPolicy) []admissionregistrationv1.RuleWithOperations {
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	var out []admissionregistrationv1.RuleWithOperations
	for _, ap := range policies {
		if !ap.compiled.CEL() {
			continue
		}
		for _, u := range ap.compiled.Units() {
			for _, r := range u.Resources {
				out = append(out, admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
					APIGroups: r.Groups, APIVersions: r.Versions, Resources: r.Resources, Scope: ptr.To(admissionregistrationv1.AllScopes)}})
			}
		}
	}
	return out
}

// wildcardMatch matches a kind written with * and ? wildcards.
func wildcardMatch(pattern, kind string) bool {
	if kind == "" {
		return false
	}
	return wildcard.Match(pattern, kind)
}
