package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/pattern"
	"github.com/tally-dev/tally/engine/schema"
)

// CheckObject checks a ClusterPolicy or Policy object as read from a file
// (decoded YAML or JSON) against its CRD's schema: unknown fields (such as
// spec.validationFailureActoin), types, required fields and enums. A policy
// read from a cluster has passed this check at the API server; the spec
// checks of Malformed apply to both.
func CheckObject(obj map[string]any) error {
	return schema.Validate(obj)
}

// checkSpec reports, with their field paths, what makes a spec one Kyverno
// refuses: values its CRD's schema does not allow (enums such as
// validationFailureAction Audit/Enforce and the lowercase legacy spellings,
// failurePolicy Fail/Ignore, validate.failureAction, podSecurity.level), a
// rule without match, a condition operator that does not exist, a pattern
// key that is a malformed anchor, a podSecurity version that is not one.
func checkSpec(kind string, spec *kyvernov1.Spec) error {
	var errs []error
	if err := schemaOfSpec(kind, spec); err != nil {
		errs = append(errs, err)
	}
	rules := field.NewPath("spec", "rules")
	for i := range spec.Rules {
		errs = append(errs, checkRule(rules.Index(i), &spec.Rules[i])...)
		if vi := spec.Rules[i].VerifyImages; vi != nil {
			errs = append(errs, checkVerifyImages(rules.Index(i).Child("verifyImages"), vi.Raw, spec.ValidationFailureAction.Audit())...)
		}
	}
	return errors.Join(errs...)
}

// schemaOfSpec validates the typed spec, encoded back to JSON, against the
// CRD's schema: what the types can hold but the schema refuses (enums).
func schemaOfSpec(kind string, spec *kyvernov1.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return schema.ValidateSpec(kind, m)
}

func checkRule(path *field.Path, r *kyvernov1.Rule) []error {
	var errs []error
	if matchIsEmpty(r.Match) {
		errs = append(errs, field.Required(path.Child("match"), "every rule needs a match (any, all or resources)"))
	}
	errs = append(errs, checkConditions(path.Child("preconditions"), r.Preconditions)...)
	v := r.Validate
	if v == nil {
		return errs
	}
	vp := path.Child("validate")
	errs = append(errs, checkPatternJSON(vp.Child("pattern"), v.Pattern, false)...)
	errs = append(errs, checkPatternJSON(vp.Child("anyPattern"), v.AnyPattern, true)...)
	if v.Deny != nil {
		errs = append(errs, checkConditions(vp.Child("deny", "conditions"), v.Deny.Conditions)...)
	}
	errs = append(errs, checkForEach(vp.Child("foreach"), v.ForEach)...)
	if ps := v.PodSecurity; ps != nil && ps.Version != "" && ps.Version != "latest" && !podSecurityVersion.MatchString(ps.Version) {
		errs = append(errs, field.Invalid(vp.Child("podSecurity", "version"), ps.Version, `want "latest" or a Kubernetes minor version such as "v1.29"`))
	}
	return errs
}

var podSecurityVersion = regexp.MustCompile(`^v1\.(0|[1-9][0-9]*)$`)

// matchIsEmpty reports a match that selects nothing to match on: no any,
// no all, no resources, no user criteria (Kyverno: "match resources not
// specified").
func matchIsEmpty(m kyvernov1.MatchResources) bool {
	return len(m.Any) == 0 && len(m.All) == 0 && m.UserInfo.IsEmpty() && m.Resources.IsEmpty()
}

func checkForEach(path *field.Path, list []kyvernov1.ForEachValidation) []error {
	var errs []error
	for i := range list {
		fe := &list[i]
		p := path.Index(i)
		errs = append(errs, checkConditions(p.Child("preconditions"), fe.Preconditions)...)
		errs = append(errs, checkPatternJSON(p.Child("pattern"), fe.Pattern, false)...)
		errs = append(errs, checkPatternJSON(p.Child("anyPattern"), fe.AnyPattern, true)...)
		if fe.Deny != nil {
			errs = append(errs, checkConditions(p.Child("deny", "conditions"), fe.Deny.Conditions)...)
		}
		if fe.ForEach != nil {
			var nested []kyvernov1.ForEachValidation
			if err := json.Unmarshal(fe.ForEach.Raw, &nested); err != nil {
				errs = append(errs, field.Invalid(p.Child("foreach"), "", fmt.Sprintf("want a list of foreach entries: %v", err)))
				continue
			}
			errs = append(errs, checkForEach(p.Child("foreach"), nested)...)
		}
	}
	return errs
}

// checkConditions refuses operators the engine does not know, wherever
// they are in {any, all} blocks or plain lists. Other structural problems
// are left to evaluation, which reports them as error results.
func checkConditions(path *field.Path, raw *apiextv1.JSON) []error {
	if raw == nil || len(raw.Raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw.Raw, &v); err != nil {
		return []error{field.Invalid(path, "", err.Error())}
	}
	var errs []error
	var walk func(p *field.Path, v any)
	walk = func(p *field.Path, v any) {
		switch t := v.(type) {
		case []any:
			for i, x := range t {
				walk(p.Index(i), x)
			}
		case map[string]any:
			if op, ok := t["operator"]; ok {
				name, _ := op.(string)
				if !conditions.KnownOperator(name) {
					errs = append(errs, field.NotSupported(p.Child("operator"), op, conditions.Operators()))
				}
				return
			}
			for _, k := range []string{"any", "all"} {
				if x, ok := t[k]; ok {
					walk(p.Child(k), x)
				}
			}
		}
	}
	walk(path, v)
	return errs
}

// checkPatternJSON refuses malformed anchors in a pattern (or in each
// pattern of an anyPattern list).
func checkPatternJSON(path *field.Path, raw *apiextv1.JSON, list bool) []error {
	if raw == nil || len(raw.Raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw.Raw, &v); err != nil {
		return []error{field.Invalid(path, "", err.Error())}
	}
	var errs []error
	if l, ok := v.([]any); ok && list {
		for i, p := range l {
			errs = append(errs, checkAnchors(path.Index(i), p)...)
		}
		return errs
	}
	return checkAnchors(path, v)
}

func checkAnchors(path *field.Path, v any) []error {
	var errs []error
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := pattern.CheckKey(k); err != nil {
				errs = append(errs, field.Invalid(path.Child(k), k, err.Error()))
				continue
			}
			errs = append(errs, checkAnchors(path.Child(k), t[k])...)
		}
	case []any:
		for i, x := range t {
			errs = append(errs, checkAnchors(path.Index(i), x)...)
		}
	}
	return errs
}

// kindOf is the CRD kind of a compiled policy.
func kindOf(p *Policy) string {
	if p.Namespace == "" {
		return schema.KindClusterPolicy
	}
	return schema.KindPolicy
}
