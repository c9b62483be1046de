package tester

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/engine"
)

// valueSource serves a test's values for one resource to the engine.
type valueSource struct {
	spec     *ValuesSpec
	resource string
	// drop are context entry names whose values are left out (the data is
	// read live).
	drop map[string]bool
}

// kept is values without those naming a dropped entry, and without
// request.operation: the operation is the request's (evaluate reads it from
// the values, a CREATE when it is empty, as Kyverno's CLI runs a resource
// whose values say `request.operation: ""`: issue 40).
func (v *valueSource) kept(values map[string]any) map[string]any {
	if len(values) == 0 {
		return values
	}
	if _, ok := values[operationKey]; !ok && len(v.drop) == 0 {
		return values
	}
	out := make(map[string]any, len(values))
	for k, val := range values {
		root, _, _ := strings.Cut(k, ".")
		if !v.drop[root] && k != operationKey {
			out[k] = val
		}
	}
	return out
}

// operationKey is the values key of the request's operation.
const operationKey = "request.operation"

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
	return v.kept(v.policyValues(policy))
}

func (v *valueSource) policyValues(policy string) map[string]any {
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
		return v.kept(r.Values)
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

// ReadValues reads a Values file (cli.kyverno.io Values, as `kyverno apply
// -f` takes it).
func ReadValues(path string) (*ValuesSpec, error) {
	var v ValuesSpec
	if err := readInto(path, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ReadUserInfo reads a UserInfo file (`kyverno apply -u`): the requesting
// user, their roles and cluster roles.
func ReadUserInfo(path string) (*engine.UserInfo, error) {
	var u UserInfoSpec
	if err := readInto(path, &u); err != nil {
		return nil, err
	}
	return &engine.UserInfo{Username: u.UserInfo.Username, UID: u.UserInfo.UID, Groups: u.UserInfo.Groups,
		Extra: u.UserInfo.Extra, Roles: u.Roles, ClusterRoles: u.ClusterRoles}, nil
}

// WithGlobalValues returns the values with more global values (--set),
// which win over the file's.
func WithGlobalValues(spec *ValuesSpec, set map[string]any) *ValuesSpec {
	if len(set) == 0 {
		return spec
	}
	return mergeValues(&ValuesSpec{GlobalValues: set}, orEmpty(spec))
}

func orEmpty(spec *ValuesSpec) *ValuesSpec {
	if spec == nil {
		return &ValuesSpec{}
	}
	return spec
}

// ValueSource serves the values of one resource (by name) to the engine.
func ValueSource(spec *ValuesSpec, resource string) engine.ValueSource {
	if spec == nil {
		return nil
	}
	return &valueSource{spec: spec, resource: resource}
}

// NamespaceLabels are the labels the values give namespaces.
func (v *ValuesSpec) NamespaceLabels(namespace string) map[string]string {
	if v == nil {
		return nil
	}
	var out map[string]string
	for _, s := range v.NamespaceSelector {
		if s.Name == namespace {
			out = s.Labels
		}
	}
	for _, ns := range v.Namespaces {
		if ns.Name == namespace {
			out = ns.Labels
		}
	}
	return out
}

// SubresourceOf says, for an object whose group, version and kind are those
// of a subresource the values list (autoscaling/v1 Scale), which subresource
// it is ("scale") and the kind of its parent resource (apps/v1 Deployment),
// as Kyverno's CLI reads the values' subresources. Other objects are not
// subresources: "" and an empty kind.
func (v *ValuesSpec) SubresourceOf(obj map[string]any) (string, schema.GroupVersionKind) {
	if v == nil || len(v.Subresources) == 0 {
		return "", schema.GroupVersionKind{}
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return "", schema.GroupVersionKind{}
	}
	for _, s := range v.Subresources {
		sub, parent := s.Subresource, s.ParentResource
		if sub.Kind != kind || sub.Group != gv.Group || sub.Version != gv.Version {
			continue
		}
		_, name, found := strings.Cut(sub.Name, "/")
		if !found || name == "" || parent.Kind == "" {
			continue
		}
		return name, schema.GroupVersionKind{Group: parent.Group, Version: parent.Version, Kind: parent.Kind}
	}
	return "", schema.GroupVersionKind{}
}
