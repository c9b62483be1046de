package podsecurity

import (
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/wildcard"
)

// Result of a podSecurity evaluation.
type Result struct {
	Pass bool
	// Message lists the violated checks as Kyverno reports them, after
	// Kyverno's "Validation rule '<name>' failed. " (which the caller adds):
	//
	//	It violates PodSecurity "restricted:latest": (Forbidden reason: allowPrivilegeEscalation != false, field error list: [spec.containers[0].securityContext.allowPrivilegeEscalation: Required value])
	Message string
	// Checks are the violated checks, in the order of the
	// pod-security-admission checks.
	Checks []CheckFailure
}

// CheckFailure is one violated check.
type CheckFailure struct {
	// ID is the pod-security-admission check ("capabilities_restricted").
	ID string
	// Control is the Pod Security Standards control ("Capabilities").
	Control string
	// Reason and Detail are the check's ForbiddenReason and ForbiddenDetail.
	Reason string
	Detail string
	// Fields are the fields that violate the check and no exclusion exempts.
	Fields []FieldError
	// Images are the images of the containers the check's detail names
	// ("container \"app\" must ..."), as full references
	// (docker.io/library/nginx:latest is "docker.io/nginx:latest"), in the
	// order it names them; a container without an image is given by name.
	// Nil when the detail names no container, as for pod-level checks.
	Images []string
}

// Compiled is a podSecurity rule prepared once: level and version parsed,
// checks selected, exclusions validated and sorted by check.
type Compiled struct {
	rule    kyvernov1.PodSecurity
	level   psaapi.Level
	checks  []compiledCheck
	heading string // It violates PodSecurity "level:version":
}

type compiledCheck struct {
	id         policy.CheckID
	control    string
	fn         policy.CheckPodFn
	fields     enumerator
	oracle     *oracle
	exclusions []exclusion // of the check's control
}

// exclusion is one exclude entry of the rule, for one control.
type exclusion struct {
	images []string // wildcards; set: container-level fields of these images
	field  string   // restrictedField; empty: every field of the control
	values []string // wildcards; empty: any value
}

// Compile validates a rule and selects the checks of its level and version.
func Compile(rule kyvernov1.PodSecurity) (*Compiled, error) {
	return compile(rule, true)
}

func compile(rule kyvernov1.PodSecurity, fromRule bool) (*Compiled, error) {
	level, err := psaapi.ParseLevel(rule.Level)
	if err != nil {
		return nil, fmt.Errorf("level %q: %w", rule.Level, err)
	}
	ver := psaapi.LatestVersion()
	if rule.Version != "" && rule.Version != "latest" {
		if ver, err = psaapi.ParseVersion(rule.Version); err != nil {
			return nil, fmt.Errorf("version %q: %w", rule.Version, err)
		}
	}
	for i, ex := range rule.Exclude {
		if err := validateExclusion(ex, fromRule && level == psaapi.LevelBaseline); err != nil {
			return nil, fmt.Errorf("exclude[%d]: %w", i, err)
		}
	}
	c := &Compiled{
		rule:    rule,
		level:   level,
		heading: fmt.Sprintf("It violates PodSecurity %q: ", rule.Level+":"+rule.Version),
	}
	if level == psaapi.LevelPrivileged {
		return c, nil
	}
	// Every check of the level, at the newest revision the version has.
	// Unlike the admission plugin, a restricted check does not replace the
	// baseline one it overrides: Kyverno reports both, and a baseline
	// control stays in force when its restricted sibling is excluded.
	for _, chk := range policy.DefaultChecks() {
		if chk.Level == psaapi.LevelRestricted && level != psaapi.LevelRestricted {
			continue
		}
		vc := revisionFor(chk, ver)
		if vc == nil {
			continue
		}
		cc := compiledCheck{id: chk.ID, fn: vc.CheckPod, fields: enumeratorFor(chk.ID, vc.MinimumVersion), oracle: newOracle(vc.CheckPod)}
		if ctl := controlOfCheck[chk.ID]; ctl != nil {
			cc.control = ctl.name
			for _, ex := range rule.Exclude {
				if ex.ControlName == ctl.name {
					cc.exclusions = append(cc.exclusions, exclusion{images: ex.Images, field: ex.RestrictedField, values: ex.Values})
				}
			}
		}
		c.checks = append(c.checks, cc)
	}
	return c, nil
}

// revisionFor returns the newest revision of a check that the version has.
func revisionFor(chk policy.Check, ver psaapi.Version) *policy.VersionedCheck {
	var found *policy.VersionedCheck
	for i := range chk.Versions {
		vc := &chk.Versions[i]
		if ver.Latest() || !ver.Older(vc.MinimumVersion) {
			found = vc
		}
	}
	return found
}

// WithExclusions returns the rule with the exclusions of a PolicyException
// added (validated as Kyverno validates an exception's: without the level
// rule).
func (c *Compiled) WithExclusions(extra []kyvernov1.PodSecurityStandard) (*Compiled, error) {
	for i, ex := range extra {
		if err := validateExclusion(ex, false); err != nil {
			return nil, fmt.Errorf("exception exclusion %d: %w", i, err)
		}
	}
	r := c.rule
	r.Exclude = append(append([]kyvernov1.PodSecurityStandard{}, r.Exclude...), extra...)
	return compile(r, false)
}

// Evaluate is the one-shot form of Compile and Evaluate.
func Evaluate(rule kyvernov1.PodSecurity, kind string, obj map[string]any) (Result, error) {
	c, err := Compile(rule)
	if err != nil {
		return Result{}, err
	}
	return c.Evaluate(kind, obj)
}

// Evaluate runs the rule on a Pod or a Pod controller given as JSON values.
// It returns an error for a resource that has no pod spec, or one that is not
// a valid pod.
func (c *Compiled) Evaluate(kind string, obj map[string]any) (Result, error) {
	if c.level == psaapi.LevelPrivileged {
		if _, _, err := template(kind, obj); err != nil {
			return Result{}, err
		}
		return Result{Pass: true}, nil
	}
	pod, err := PodOf(kind, obj)
	if err != nil {
		return Result{}, err
	}
	return c.EvaluatePod(pod), nil
}

// EvaluatePod runs the rule on a pod already read. It never modifies it, and
// is safe for concurrent use.
func (c *Compiled) EvaluatePod(pod *Pod) Result {
	var fails []CheckFailure
	for i := range c.checks {
		chk := &c.checks[i]
		r := chk.fn(pod.Meta, pod.Spec)
		if r.Allowed {
			continue
		}
		if f, failed := chk.failure(pod, r); failed {
			f.Images = imagesNamed(f.Detail, pod.Spec)
			fails = append(fails, f)
		}
	}
	if len(fails) == 0 {
		return Result{Pass: true}
	}
	return Result{Checks: fails, Message: c.message(fails)}
}

// failure judges a failed check against the exclusions of its control. The
// check is exempt when every violating field is exempt and the check, run
// again on a copy of the pod with those fields set to allowed values, passes:
// the check has the last word, whatever the field lists say.
func (chk *compiledCheck) failure(pod *Pod, r policy.CheckResult) (CheckFailure, bool) {
	f := CheckFailure{ID: string(chk.id), Control: chk.control, Reason: r.ForbiddenReason, Detail: r.ForbiddenDetail}
	var vs []violation
	if chk.fields != nil {
		vs = chk.fields(pod.Meta, pod.Spec, chk.oracle)
	}
	kept := vs
	if len(chk.exclusions) > 0 && len(vs) > 0 {
		kept = make([]violation, 0, len(vs))
		for i := range vs {
			if !chk.exempt(&vs[i], pod.Spec) {
				kept = append(kept, vs[i])
			}
		}
		if len(kept) == 0 {
			meta, spec := neutralised(pod, vs)
			again := chk.fn(meta, spec)
			if again.Allowed {
				return CheckFailure{}, false
			}
			// The check found something no field listed: report it.
			f.Detail = again.ForbiddenDetail
		}
	}
	if len(kept) > 0 {
		f.Fields = make([]FieldError, len(kept))
		for i := range kept {
			f.Fields[i] = kept[i].fieldError(pod.paths)
		}
	}
	return f, true
}

// exempt reports whether an exclusion of the check's control covers v: one
// without images for a pod-level field, one whose images match the
// container's for a container-level field; then the restrictedField, if any,
// must be the field, and the values, if any, must match every bad value.
func (chk *compiledCheck) exempt(v *violation, spec *corev1.PodSpec) bool {
	for i := range chk.exclusions {
		ex := &chk.exclusions[i]
		if v.ref.podLevel() {
			if len(ex.images) > 0 {
				continue
			}
		} else if len(ex.images) == 0 || !wildcard.Any(ex.images, v.ref.in(spec).Image) {
			continue
		}
		if ex.field != "" && !fieldMatches(ex.field, v.path) {
			continue
		}
		if len(ex.values) > 0 && !allMatch(ex.values, v.bad) {
			continue
		}
		return true
	}
	return false
}

// fieldMatches compares a restrictedField with a field's path: indices
// stand for [*]; "metadata.annotations" names every annotation.
func fieldMatches(restricted, path string) bool {
	return restricted == indexPattern(path) || restricted == path ||
		restricted == "metadata.annotations" && strings.HasPrefix(path, "metadata.annotations[")
}

func allMatch(patterns, values []string) bool {
	for _, v := range values {
		if !wildcard.Any(patterns, v) {
			return false
		}
	}
	return true
}

// neutralised returns copies of the pod's metadata and spec with every
// violation's field set to an allowed value.
func neutralised(pod *Pod, vs []violation) (*metav1.ObjectMeta, *corev1.PodSpec) {
	meta := *pod.Meta
	meta.Annotations = maps.Clone(pod.Meta.Annotations)
	spec := pod.Spec.DeepCopy()
	for i := range vs {
		vs[i].fix(&meta, spec)
	}
	return &meta, spec
}

// message renders the failures as Kyverno does: one parenthesised group per
// check, with the fields that violate it.
func (c *Compiled) message(fails []CheckFailure) string {
	var b strings.Builder
	b.Grow(len(c.heading) + 160*len(fails))
	b.WriteString(c.heading)
	for _, f := range fails {
		b.WriteString("(Forbidden reason: ")
		b.WriteString(f.Reason)
		b.WriteString(", field error list: [")
		for i, e := range f.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			e.writeTo(&b)
		}
		if len(f.Fields) == 0 {
			b.WriteString(f.Detail)
		}
		b.WriteString("])")
	}
	return b.String()
}
