package engine

import (
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/engine/match"
)

// constraints is a compiled matchConstraints, evaluated as Kyverno's own
// matcher does: namespaceSelector, objectSelector, excludeResourceRules,
// then resourceRules, on the literal group/version/resource (matchPolicy is
// not evaluated).
type constraints struct {
	namespaceSelector, objectSelector labels.Selector
	rules, exclude                    []admissionregistrationv1.NamedRuleWithOperations
}

func compileConstraints(m *admissionregistrationv1.MatchResources) (*constraints, error) {
	if m == nil {
		return nil, nil
	}
	c := &constraints{rules: m.ResourceRules, exclude: m.ExcludeResourceRules}
	var err error
	if c.namespaceSelector, err = selector(m.NamespaceSelector); err != nil {
		return nil, fmt.Errorf("matchConstraints.namespaceSelector: %w", err)
	}
	if c.objectSelector, err = selector(m.ObjectSelector); err != nil {
		return nil, fmt.Errorf("matchConstraints.objectSelector: %w", err)
	}
	return c, nil
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// matches reports whether the constraints select a resource for an
// operation. nsLabels are the labels of its namespace (nil: unknown, then
// the namespace has only its kubernetes.io/metadata.name label).
func (c *constraints) matches(res *match.Resource, gvr schema.GroupVersionResource, op string, nsLabels map[string]string) bool {
	if c == nil {
		return false
	}
	namespaced := res.Namespace != ""
	isNamespace := res.Kind == "Namespace" && res.Group == ""
	switch {
	case isNamespace:
		if !c.namespaceSelector.Matches(labels.Set(res.Labels)) {
			return false
		}
	case namespaced && !c.namespaceSelector.Empty():
		var set labels.Labels = labels.Set(nsLabels)
		if nsLabels == nil {
			set = nameOnly(res.Namespace)
		}
		if !c.namespaceSelector.Matches(set) {
			return false
		}
	}
	if !c.objectSelector.Matches(labels.Set(res.Labels)) {
		return false
	}
	for i := range c.exclude {
		if ruleMatches(&c.exclude[i], res, gvr, op, namespaced) {
			return false
		}
	}
	if len(c.rules) == 0 {
		return true
	}
	for i := range c.rules {
		if ruleMatches(&c.rules[i], res, gvr, op, namespaced) {
			return true
		}
	}
	return false
}

// ruleMatches is an admission rule's test: groups, versions, resources
// (with subresources: "pods/status", "*/*"), operations, scope and names.
func ruleMatches(r *admissionregistrationv1.NamedRuleWithOperations, res *match.Resource, gvr schema.GroupVersionResource, op string, namespaced bool) bool {
	if !listHas(r.APIGroups, gvr.Group) || !listHas(r.APIVersions, gvr.Version) {
		return false
	}
	if !resourceListed(r.Resources, gvr.Resource, res.Subresource) {
		return false
	}
	if !slices.ContainsFunc(r.Operations, func(o admissionregistrationv1.OperationType) bool {
		return o == admissionregistrationv1.OperationAll || string(o) == op
	}) {
		return false
	}
	if r.Scope != nil {
		switch *r.Scope {
		case admissionregistrationv1.ClusterScope:
			if namespaced {
				return false
			}
		case admissionregistrationv1.NamespacedScope:
			if !namespaced && res.Kind != "Namespace" {
				return false
			}
		}
	}
	if len(r.ResourceNames) > 0 {
		name := res.Name
		if name == "" {
			return res.GenerateName != "" && slices.ContainsFunc(r.ResourceNames, func(n string) bool { return strings.HasPrefix(n, res.GenerateName) })
		}
		return slices.Contains(r.ResourceNames, name)
	}
	return true
}

// nameOnly is the labels of a namespace known by name alone: the one label
// every namespace has.
type nameOnly string

func (n nameOnly) Has(label string) bool { return label == "kubernetes.io/metadata.name" }
func (n nameOnly) Get(label string) string {
	if label == "kubernetes.io/metadata.name" {
		return string(n)
	}
	return ""
}
func (n nameOnly) Lookup(label string) (string, bool) { return n.Get(label), n.Has(label) }

func listHas(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, "*")
}

func resourceListed(list []string, resource, sub string) bool {
	want := resource
	if sub != "" {
		want += "/" + sub
	}
	for _, e := range list {
		switch {
		case e == want, e == "*/*":
			return true
		case e == "*" && sub == "":
			return true
		case sub != "" && (e == resource+"/*" || e == "*/"+sub):
			return true
		}
	}
	return false
}

// podControllers are the controllers a ValidatingPolicy on Pods is
// generated for, by Kyverno's autogen config key.
var podControllers = []struct {
	config     string
	group      string
	resource   string
	specPrefix string // what object.spec and object.metadata move under
}{
	{"defaults", "apps", "daemonsets", "spec.template."},
	{"defaults", "apps", "deployments", "spec.template."},
	{"defaults", "apps", "replicasets", "spec.template."},
	{"defaults", "apps", "statefulsets", "spec.template."},
	{"defaults", "batch", "jobs", "spec.template."},
	{"cronjobs", "batch", "cronjobs", "spec.jobTemplate.spec.template."},
}

// autogenTargets groups, per autogen config, the controllers a policy is
// generated for: none unless the policy matches Pods alone (one rule, core
// v1 pods, no object selector, no excluded rules, no names); all six unless
// the policy lists them.
func autogenTargets(m *admissionregistrationv1.MatchResources, controllers []string, listed bool) map[string][]admissionregistrationv1.NamedRuleWithOperations {
	if m == nil || len(m.ResourceRules) != 1 || len(m.ExcludeResourceRules) > 0 {
		return nil
	}
	if s := m.ObjectSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
		return nil
	}
	r := m.ResourceRules[0]
	if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.APIVersions, []string{"v1"}) ||
		!slices.Equal(r.Resources, []string{"pods"}) || len(r.ResourceNames) > 0 {
		return nil
	}
	out := map[string][]admissionregistrationv1.NamedRuleWithOperations{}
	for _, pc := range podControllers {
		if listed && !slices.Contains(controllers, pc.resource) {
			continue
		}
		rules := out[pc.config]
		i := slices.IndexFunc(rules, func(x admissionregistrationv1.NamedRuleWithOperations) bool { return x.APIGroups[0] == pc.group })
		if i < 0 {
			nr := admissionregistrationv1.NamedRuleWithOperations{}
			nr.Operations = r.Operations
			nr.APIGroups = []string{pc.group}
			nr.APIVersions = []string{"v1"}
			rules = append(rules, nr)
			i = len(rules) - 1
		}
		rules[i].Resources = append(rules[i].Resources, pc.resource)
		out[pc.config] = rules
	}
	return out
}

// shiftObjectPaths rewrites object.spec / object.metadata (and oldObject's)
// in an expression to the Pod template of a controller, leaving
// object.metadata.namespace as it is.
func shiftObjectPaths(expr, prefix string) string {
	var b strings.Builder
	for i := 0; i < len(expr); {
		root := ""
		for _, r := range []string{"oldObject.", "object."} {
			if strings.HasPrefix(expr[i:], r) && (i == 0 || (!isWordChar(expr[i-1]) && expr[i-1] != '.')) {
				root = r
				break
			}
		}
		if root == "" {
			b.WriteByte(expr[i])
			i++
			continue
		}
		rest := expr[i+len(root):]
		field := ""
		for _, f := range []string{"spec", "metadata"} {
			if strings.HasPrefix(rest, f) && (len(rest) == len(f) || !isWordChar(rest[len(f)])) {
				field = f
				break
			}
		}
		if field == "" || (field == "metadata" && strings.HasPrefix(rest[len(field):], ".namespace")) {
			b.WriteString(root)
			i += len(root)
			continue
		}
		b.WriteString(root + prefix + field)
		i += len(root) + len(field)
	}
	return b.String()
}

func isWordChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
