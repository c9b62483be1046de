package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/pattern"
	"github.com/tally-dev/tally/engine/variables"
)

// admissionOnlyVariable matches references to request data that exists only
// at admission (docs/reporting-rules.md, R06): request.userInfo, request.roles,
// request.clusterRoles and the top-level serviceAccountName and
// serviceAccountNamespace (not a field of that name, such as
// request.object.spec.serviceAccountName).
var admissionOnlyVariable = regexp.MustCompile(`(^|[^.\w])(request\.(userInfo|roles|clusterRoles)|serviceAccountName|serviceAccountNamespace)\b`)

var variableRef = regexp.MustCompile(`\{\{(.*?)\}\}`)

// ValidateBackground reports why a policy cannot run in background scans
// (nil if it can, or if background is off): rules that read admission-only
// request data, or that match or exclude by user, role or subject.
func ValidateBackground(spec *kyvernov1.Spec) error {
	if !spec.BackgroundEnabled() {
		return nil
	}
	var errs []error
	for i := range spec.Rules {
		r := &spec.Rules[i]
		if usesUserInfo(r.Match) || (r.Exclude != nil && usesUserInfo(*r.Exclude)) {
			errs = append(errs, fmt.Errorf("rule %s: match/exclude on roles, clusterRoles or subjects needs admission data; set background: false", r.Name))
			continue
		}
		// Every part of the rule but match/exclude may hold variables.
		scan := *r
		scan.Match, scan.Exclude = kyvernov1.MatchResources{}, nil
		data, err := json.Marshal(scan)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %s: %w", r.Name, err))
			continue
		}
		for _, m := range variableRef.FindAllSubmatch(data, -1) {
			if v := admissionOnlyVariable.FindSubmatch(m[1]); v != nil {
				errs = append(errs, fmt.Errorf("rule %s: variable %s is only available at admission; set background: false", r.Name, v[2]))
			}
		}
	}
	return errors.Join(errs...)
}

func usesUserInfo(m kyvernov1.MatchResources) bool {
	if !m.UserInfo.IsEmpty() {
		return true
	}
	for _, f := range append(append(kyvernov1.ResourceFilters{}, m.Any...), m.All...) {
		if !f.UserInfo.IsEmpty() {
			return true
		}
	}
	return false
}

// Malformed reports what makes a policy one to refuse: a spec its CRD's
// schema does not allow (enums), Kyverno's semantic rules (a match on every
// rule, known condition operators, well-formed anchors; see checkSpec), and
// the rules that do not compile (a bad pattern, JMESPath, match...). Every
// reason names its field path or rule. A construct the engine
// does not support (manifests, assert) is not malformed: it
// gives error results where the rule matches (never a silent pass). The
// scanner and the admission webhook both refuse such policies, so that they
// agree on which policies exist.
func Malformed(p *Policy) error {
	var errs []error
	if err := checkSpec(kindOf(p), &p.Spec); err != nil {
		errs = append(errs, err)
	}
	for i := range p.Spec.Rules {
		if err := checkElementVariables(&p.Spec.Rules[i]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range p.Rules {
		if err := checkPatterns(r.Raw.Validate); err != nil {
			errs = append(errs, fmt.Errorf("rule %s: %w", r.Name, err))
			continue
		}
		if r.Err == nil {
			continue
		}
		if v := r.Raw.Validate; v != nil && (v.CEL != nil || v.Manifests != nil || v.Assert != nil) {
			continue
		}
		errs = append(errs, r.Err)
	}
	return errors.Join(errs...)
}

// checkPatterns rejects patterns that can never be evaluated meaningfully
// (an empty list, an existence anchor without a list: see pattern.Check).
func checkPatterns(v *kyvernov1.Validation) error {
	if v == nil {
		return nil
	}
	if v.Pattern != nil {
		var p any
		if err := json.Unmarshal(v.Pattern.Raw, &p); err != nil {
			return fmt.Errorf("pattern: %w", err)
		}
		if err := pattern.Check(p); err != nil {
			return err
		}
	}
	if v.AnyPattern != nil {
		var ps []any
		if err := json.Unmarshal(v.AnyPattern.Raw, &ps); err != nil {
			return fmt.Errorf("anyPattern: want a list of patterns: %w", err)
		}
		for i, p := range ps {
			if err := pattern.Check(p); err != nil {
				return fmt.Errorf("anyPattern %d: %w", i, err)
			}
		}
	}
	return nil
}

// checkElementVariables refuses a rule that reads a foreach element
// ({{element...}}, {{elementIndex}}) outside of a foreach declaration, as
// Kyverno's policy validation does: such a variable can never resolve.
func checkElementVariables(r *kyvernov1.Rule) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	var walk func(v any, path string) error
	check := func(s, path string) error {
		if strings.Contains(path, "/foreach/") {
			return nil
		}
		for _, ref := range variables.References(s) {
			name := strings.TrimSpace(ref)
			if strings.HasPrefix(name, "element") {
				return fmt.Errorf("variable '%s' present outside of foreach at path %s", name, path)
			}
		}
		return nil
	}
	walk = func(v any, path string) error {
		switch t := v.(type) {
		case string:
			return check(t, path)
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if err := check(k, path+"/"+k); err != nil {
					return err
				}
				if err := walk(t[k], path+"/"+k); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range t {
				if err := walk(e, path+"/"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(doc, "")
}
