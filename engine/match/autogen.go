package match

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// AnnotationAutogenControllers is the policy annotation that chooses the
// controllers autogen generates rules for: "none", or a comma-separated list
// of kinds such as "Deployment,CronJob".
const AnnotationAutogenControllers = "pod-policies.kyverno.io/autogen-controllers"

// CronJob gets a rule of its own, as its Pod template sits deeper.
const cronJob = "CronJob"

// Autogen rule name prefixes, and the longest rule name Kyverno keeps.
const (
	autogenPrefix        = "autogen-"
	autogenCronJobPrefix = "autogen-cronjob-"
	maxRuleName          = 63
)

// defaultControllers are the Pod controllers autogen targets when the
// annotation is absent, CronJob included.
// Kyverno sorts the kinds it writes into generated rules; so does tally.
var defaultControllers = []string{cronJob, "DaemonSet", "Deployment", "Job", "ReplicaSet", "ReplicationController", "StatefulSet"}

// podControllerKinds are the kinds whose presence in a policy's match or
// exclude makes autogen relevant at all.
var podControllerKinds = append([]string{"Pod"}, defaultControllers...)

// target is where a Pod sits inside a controller kind.
type target struct {
	prefix string
	// everyFilter gives the kinds to every filter of any/all, not only to
	// those naming Pod.
	everyFilter bool
	// open and close surround a Pod pattern to nest it in the controller.
	open, close string
	// shift is inserted between a reference to the object (request.object.,
	// object.) and its spec or metadata.
	shift string
}

var (
	templateTarget = target{
		prefix: autogenPrefix,
		open:   `{"spec":{"template":`,
		close:  `}}`,
		shift:  "spec.template.",
	}
	cronJobTarget = target{
		prefix:      autogenCronJobPrefix,
		everyFilter: true,
		open:        `{"spec":{"jobTemplate":{"spec":{"template":`,
		close:       `}}}}`,
		shift:       "spec.jobTemplate.spec.template.",
	}
)

// Autogen returns the rules Kyverno evaluates for a policy: its rules followed,
// when autogen applies, by the rules generated for Pod controllers. For every
// validate rule that matches Pods it adds "autogen-<name>", matching the Pod
// controllers other than CronJob (Deployment, DaemonSet, Job, ReplicaSet,
// ReplicationController, StatefulSet), then "autogen-cronjob-<name>" matching
// CronJob, in the order of the rules. See the package documentation for which
// policies and rules qualify and how rules are rewritten. The input is not
// modified; the policy's own rules are returned as given (sharing their
// contents with the input), generated rules share nothing with it. The error
// reports a rule that could not be rewritten.
func Autogen(policyAnnotations map[string]string, rules []kyvernov1.Rule) ([]kyvernov1.Rule, error) {
	controllers := AutogenControllers(policyAnnotations, rules)
	var kinds []string
	withCronJob := false
	for _, c := range controllers {
		if c == cronJob {
			withCronJob = true
		} else {
			kinds = append(kinds, c)
		}
	}
	var generated []kyvernov1.Rule
	for i := range rules {
		r := &rules[i]
		if !generatesFor(r) {
			continue
		}
		if len(kinds) > 0 {
			g, err := generateRule(r, kinds, templateTarget)
			if err != nil {
				return nil, fmt.Errorf("rule %s: %w", r.Name, err)
			}
			generated = append(generated, g)
		}
		if withCronJob {
			g, err := generateRule(r, []string{cronJob}, cronJobTarget)
			if err != nil {
				return nil, fmt.Errorf("rule %s: %w", r.Name, err)
			}
			generated = append(generated, g)
		}
	}
	if len(generated) == 0 {
		return slices.Clone(rules), nil
	}
	// As Kyverno, rules of the policy that already carry an autogen name
	// (left over from an old Kyverno writing them into the spec) give way to
	// the freshly generated ones.
	out := make([]kyvernov1.Rule, 0, len(rules)+len(generated))
	for i := range rules {
		if !strings.HasPrefix(rules[i].Name, autogenPrefix) {
			out = append(out, rules[i])
		}
	}
	return append(out, generated...), nil
}

// AutogenControllers returns the kinds autogen generates rules for in a policy
// of the given annotations and rules, nil when autogen does not apply: the
// annotation's list (deduplicated and sorted; "all" stands for the
// defaults), or the default controllers when the annotation is absent.
func AutogenControllers(policyAnnotations map[string]string, rules []kyvernov1.Rule) []string {
	if !canAutogen(rules) {
		return nil
	}
	v, ok := policyAnnotations[AnnotationAutogenControllers]
	if !ok {
		return slices.Clone(defaultControllers)
	}
	var out []string
	add := func(k string) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for _, k := range strings.Split(v, ",") {
		switch k = strings.TrimSpace(k); k {
		case "":
		case "none":
			return nil
		case "all":
			for _, d := range defaultControllers {
				add(d)
			}
		default:
			add(k)
		}
	}
	slices.Sort(out)
	return out
}

// canAutogen applies Kyverno's policy-wide conditions: autogen is off for the
// whole policy when one rule generates resources or patches with JSON
// patches, or when one match or exclude filter of any rule selects by name,
// label selector or annotations, or lists Pod together with other kinds. It
// is on when some filter names Pod or a Pod controller.
func canAutogen(rules []kyvernov1.Rule) bool {
	needed := false
	for i := range rules {
		r := &rules[i]
		if r.Generate != nil || usesJSONPatch(r.Mutate) {
			return false
		}
		for _, rd := range descriptions(&r.Match) {
			if !autogenSupports(rd, &needed) {
				return false
			}
		}
		if r.Exclude != nil {
			for _, rd := range descriptions(r.Exclude) {
				if !autogenSupports(rd, &needed) {
					return false
				}
			}
		}
	}
	return needed
}

func autogenSupports(rd *kyvernov1.ResourceDescription, needed *bool) bool {
	// A set but empty selector or annotation map disables autogen too, as in Kyverno.
	if rd.Name != "" || len(rd.Names) > 0 || rd.Selector != nil || rd.Annotations != nil {
		return false
	}
	if len(rd.Kinds) > 1 && containsPod(rd.Kinds) {
		return false
	}
	for _, k := range rd.Kinds {
		if slices.Contains(podControllerKinds, k) {
			*needed = true
		}
	}
	return true
}

// descriptions returns every ResourceDescription of a match or exclude: the
// inline one and those of any and all.
func descriptions(mr *kyvernov1.MatchResources) []*kyvernov1.ResourceDescription {
	out := []*kyvernov1.ResourceDescription{&mr.Resources}
	for i := range mr.Any {
		out = append(out, &mr.Any[i].Resources)
	}
	for i := range mr.All {
		out = append(out, &mr.All[i].Resources)
	}
	return out
}

// usesJSONPatch reports whether a mutate rule patches with RFC 6902 patches,
// at its top level or in a foreach.
func usesJSONPatch(mutate *apiextv1.JSON) bool {
	if mutate == nil || len(mutate.Raw) == 0 {
		return false
	}
	var m struct {
		PatchesJSON6902 string `json:"patchesJson6902"`
		ForEach         []struct {
			PatchesJSON6902 string `json:"patchesJson6902"`
		} `json:"foreach"`
	}
	// A mutate body that does not decode is no JSON patch; tally ignores
	// mutate rules anyway.
	_ = json.Unmarshal(mutate.Raw, &m)
	if m.PatchesJSON6902 != "" {
		return true
	}
	for _, f := range m.ForEach {
		if f.PatchesJSON6902 != "" {
			return true
		}
	}
	return false
}

// generatesFor reports whether a rule of a policy that qualifies gets autogen
// rules: a verifyImages rule, or a validate rule checking with a
// pattern, anyPattern, deny, foreach, podSecurity or cel, whose match names
// Pod and whose exclude, if it names kinds, names Pod too.
func generatesFor(r *kyvernov1.Rule) bool {
	if strings.HasPrefix(r.Name, autogenPrefix) || (r.Validate == nil && r.VerifyImages == nil && !mutatesPods(r.Mutate)) {
		return false
	}
	if v := r.Validate; v != nil && v.Pattern == nil && v.AnyPattern == nil && v.Deny == nil && len(v.ForEach) == 0 && v.PodSecurity == nil && v.CEL == nil {
		return false
	}
	if !containsPod(allKinds(&r.Match)) {
		return false
	}
	if r.Exclude != nil {
		if ek := allKinds(r.Exclude); len(ek) > 0 && !containsPod(ek) {
			return false
		}
	}
	return true
}

func allKinds(mr *kyvernov1.MatchResources) []string {
	var out []string
	for _, rd := range descriptions(mr) {
		out = append(out, rd.Kinds...)
	}
	return out
}

// generateRule derives the rule for the given controller kinds.
func generateRule(src *kyvernov1.Rule, kinds []string, t target) (kyvernov1.Rule, error) {
	r := *src.DeepCopy()
	r.Name = autogenName(t.prefix, src.Name)
	r.Match = withKinds(r.Match, kinds, t.everyFilter, true)
	if r.Exclude != nil {
		ex := withKinds(*r.Exclude, kinds, t.everyFilter, false)
		r.Exclude = &ex
	}
	var podSecurity *kyvernov1.PodSecurity
	if v := r.Validate; v != nil {
		v.Pattern = wrapPattern(v.Pattern, t)
		if v.AnyPattern != nil {
			v.AnyPattern = wrapAnyPattern(v.AnyPattern, t)
		}
		// podSecurity is kept as written: its evaluator takes the Pod spec out of
		// the controller, so its restrictedField paths stay Pod-relative.
		podSecurity = v.PodSecurity
		v.PodSecurity = nil
	}
	if r.Mutate != nil && r.Validate == nil {
		m, err := wrapMutation(r.Mutate, t)
		if err != nil {
			return kyvernov1.Rule{}, fmt.Errorf("autogen: %w", err)
		}
		r.Mutate = m
	}
	// Shift the references to the object's spec and metadata in every
	// expression of the rule (context, preconditions, messages, deny
	// conditions, foreach lists, pattern values).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep pattern operators such as ">0" as written
	if err := enc.Encode(r); err != nil {
		return kyvernov1.Rule{}, fmt.Errorf("autogen: %w", err)
	}
	raw := shiftReferences(buf.Bytes(), jmesPathRoots, t.shift)
	var out kyvernov1.Rule
	if err := json.Unmarshal(raw, &out); err != nil {
		return kyvernov1.Rule{}, fmt.Errorf("autogen: %w", err)
	}
	if out.Validate != nil {
		out.Validate.PodSecurity = podSecurity
		if c := out.Validate.CEL; c != nil {
			c.Raw = shiftReferences(c.Raw, celRoots, t.shift)
		}
	}
	return out, nil
}

// autogenName prefixes a rule name, cut to the longest name Kyverno keeps.
func autogenName(prefix, name string) string {
	n := prefix + name
	if len(n) > maxRuleName {
		n = n[:maxRuleName]
	}
	return n
}

// withKinds replaces the kinds of the filters that name Pod by kinds. For the
// CronJob rule every filter of any/all gets them, as in Kyverno (the rule can
// only match CronJobs anyway). The inline filter of a match always gets them;
// that of an exclude only when it names kinds.
func withKinds(mr kyvernov1.MatchResources, kinds []string, all, isMatch bool) kyvernov1.MatchResources {
	set := func(fs kyvernov1.ResourceFilters) {
		for i := range fs {
			if all || containsPod(fs[i].Resources.Kinds) {
				fs[i].Resources.Kinds = slices.Clone(kinds)
			}
		}
	}
	switch {
	case len(mr.Any) > 0:
		set(mr.Any)
	case len(mr.All) > 0:
		set(mr.All)
	case isMatch || len(mr.Resources.Kinds) > 0:
		mr.Resources.Kinds = slices.Clone(kinds)
	}
	return mr
}

// wrapPattern nests a Pod pattern where the controller keeps its Pod
// template: the whole pattern, metadata included, moves under it.
func wrapPattern(p *apiextv1.JSON, t target) *apiextv1.JSON {
	if p == nil || len(p.Raw) == 0 {
		return p
	}
	raw := make([]byte, 0, len(t.open)+len(p.Raw)+len(t.close))
	raw = append(append(append(raw, t.open...), p.Raw...), t.close...)
	return &apiextv1.JSON{Raw: raw}
}

// wrapAnyPattern nests every pattern of an anyPattern list. A value that is
// not a list is kept as it is, so that the generated rule fails to compile
// like the rule it comes from.
func wrapAnyPattern(p *apiextv1.JSON, t target) *apiextv1.JSON {
	var list []json.RawMessage
	if err := json.Unmarshal(p.Raw, &list); err != nil {
		return p
	}
	for i := range list {
		list[i] = wrapPattern(&apiextv1.JSON{Raw: list[i]}, t).Raw
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(list); err != nil {
		return p
	}
	return &apiextv1.JSON{Raw: bytes.TrimSpace(buf.Bytes())}
}

// References to the object under admission: JMESPath variables of the
// request, and the CEL variables of validate.cel.
var (
	jmesPathRoots = []string{"request.object.", "request.oldObject."}
	celRoots      = []string{"object.", "oldObject."}
)

// shiftReferences inserts shift after every root followed by a spec or
// metadata field: with shift "spec.template.", request.object.spec.containers
// becomes request.object.spec.template.spec.containers and
// request.object.metadata.labels request.object.spec.template.metadata.labels.
// A root only counts at the start of a path (not after a letter, digit, `_`
// or `.`), and spec or metadata only as a whole field name. A quoted field
// (request."object".metadata) is not a reference, which lets policies keep
// referring to the controller's own metadata.
func shiftReferences(s []byte, roots []string, shift string) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(s); i++ {
		if i > 0 && (isIdent(s[i-1]) || s[i-1] == '.') {
			continue
		}
		for _, root := range roots {
			if !hasPrefixAt(s, i, root) {
				continue
			}
			j := i + len(root)
			if !fieldAt(s, j, "spec") && !fieldAt(s, j, "metadata") {
				continue
			}
			out = append(append(out, s[last:j]...), shift...)
			last = j
			i = j - 1
			break
		}
	}
	if out == nil {
		return s
	}
	return append(out, s[last:]...)
}

func hasPrefixAt(s []byte, i int, prefix string) bool {
	return len(s)-i >= len(prefix) && string(s[i:i+len(prefix)]) == prefix
}

// fieldAt reports whether s holds the field name at i, as a whole name.
func fieldAt(s []byte, i int, name string) bool {
	if !hasPrefixAt(s, i, name) {
		return false
	}
	j := i + len(name)
	return j == len(s) || !isIdent(s[j])
}

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// mutatesPods says whether a mutate rule gets autogen rules: one with a
// patchStrategicMerge, or a foreach (JSON patches stop autogen for the
// whole policy: canAutogen).
func mutatesPods(mutate *apiextv1.JSON) bool {
	if mutate == nil || len(mutate.Raw) == 0 {
		return false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(mutate.Raw, &m); err != nil {
		return false
	}
	_, smp := m["patchStrategicMerge"]
	_, foreach := m["foreach"]
	return smp || foreach
}

// wrapMutation nests a mutate rule's overlays where the controller keeps
// its Pod template, as Kyverno's autogen does: the patchStrategicMerge, or
// that of each foreach (which keeps its list, context and preconditions
// only).
func wrapMutation(mutate *apiextv1.JSON, t target) (*apiextv1.JSON, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(mutate.Raw, &m); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if smp, ok := m["patchStrategicMerge"]; ok {
		out["patchStrategicMerge"] = json.RawMessage(wrapPattern(&apiextv1.JSON{Raw: smp}, t).Raw)
	} else {
		var list []map[string]json.RawMessage
		if err := json.Unmarshal(m["foreach"], &list); err != nil {
			return nil, err
		}
		kept := make([]map[string]json.RawMessage, len(list))
		for i, fe := range list {
			kept[i] = map[string]json.RawMessage{}
			for _, k := range []string{"list", "context", "preconditions"} {
				if v, ok := fe[k]; ok {
					kept[i][k] = v
				}
			}
			if smp, ok := fe["patchStrategicMerge"]; ok {
				kept[i]["patchStrategicMerge"] = wrapPattern(&apiextv1.JSON{Raw: smp}, t).Raw
			}
		}
		out["foreach"] = kept
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return &apiextv1.JSON{Raw: bytes.TrimSpace(buf.Bytes())}, nil
}
