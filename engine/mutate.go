package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/kustomize/kyaml/yaml/merge2"
	sigsyaml "sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/match"
	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/engine/wildcard"
)

// Classic mutate rules (patchStrategicMerge, patchesJson6902, foreach) are
// applied by the CLI (tally test and apply), as Kyverno's CLI applies them:
// the background scan and the reports never evaluate them (R46).

// mutation is a compiled mutate body: one patch, or a foreach list.
type mutation struct {
	overlay  any    // patchStrategicMerge
	json6902 string // patchesJson6902
	foreach  []*mutateForEach
	// existing is set for mutateExisting rules (targets): they mutate other
	// resources than the one admitted, and are not applied to it.
	existing bool
	targets  []mutateTarget
}

// mutateTarget is one entry of a mutateExisting rule's targets: the
// selector (its variables substituted per trigger), and the context and
// preconditions evaluated per target.
type mutateTarget struct {
	selector      map[string]any
	context       []kyvernov1.ContextEntry
	preconditions any
}

type mutateForEach struct {
	list          string
	descending    *bool
	context       []kyvernov1.ContextEntry
	preconditions any
	mutation
}

// mutateBody is the JSON of a rule's mutate (and of a mutate foreach).
type mutateBody struct {
	PatchStrategicMerge any                      `json:"patchStrategicMerge"`
	PatchesJSON6902     string                   `json:"patchesJson6902"`
	ForEach             []mutateForEachBody      `json:"foreach"`
	Targets             []json.RawMessage        `json:"targets"`
	List                string                   `json:"list"`
	Order               string                   `json:"order"`
	Context             []kyvernov1.ContextEntry `json:"context"`
	Preconditions       any                      `json:"preconditions"`
}

type mutateForEachBody = mutateBody

func compileMutation(raw []byte) (*mutation, error) {
	var b mutateBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("mutate: %w", err)
	}
	return b.compile("mutate")
}

func (b *mutateBody) compile(where string) (*mutation, error) {
	m := &mutation{overlay: b.PatchStrategicMerge, json6902: b.PatchesJSON6902, existing: len(b.Targets) > 0}
	for i, raw := range b.Targets {
		t, err := compileTarget(raw)
		if err != nil {
			return nil, fmt.Errorf("%s.targets[%d]: %w", where, i, err)
		}
		m.targets = append(m.targets, t)
	}
	set := 0
	if m.overlay != nil {
		set++
	}
	if m.json6902 != "" {
		set++
		if _, err := jsonPatchOf(m.json6902); err != nil && !strings.Contains(m.json6902, "{{") {
			return nil, fmt.Errorf("%s.patchesJson6902: %w", where, err)
		}
	}
	for i := range b.ForEach {
		fb := &b.ForEach[i]
		at := fmt.Sprintf("%s.foreach[%d]", where, i)
		inner, err := fb.compile(at)
		if err != nil {
			return nil, err
		}
		fe := &mutateForEach{list: fb.List, context: fb.Context, preconditions: fb.Preconditions, mutation: *inner}
		switch fb.Order {
		case "":
		case "Ascending", "Descending":
			d := fb.Order == "Descending"
			fe.descending = &d
		default:
			return nil, fmt.Errorf("%s.order: %q is neither Ascending nor Descending", at, fb.Order)
		}
		if fe.list == "" {
			return nil, fmt.Errorf("%s: list is required", at)
		}
		m.foreach = append(m.foreach, fe)
	}
	if len(m.foreach) > 0 {
		set++
	}
	if set != 1 && !(where == "mutate" && m.existing && set == 0) {
		return nil, fmt.Errorf("%s needs exactly one of patchStrategicMerge, patchesJson6902, foreach (found %d)", where, set)
	}
	return m, nil
}

// MutatesClassic says whether the policy has classic mutate rules applied
// to the resource itself (not mutateExisting).
func (p *Policy) MutatesClassic() bool { return p != nil && len(p.mutateRules) > 0 }

// MutateRule finds a compiled mutate rule by the name an expectation gives
// (autogen names included).
func (p *Policy) MutateRule(name string) bool {
	for _, r := range p.mutateRules {
		if RuleNamed(r.Name, name) {
			return true
		}
	}
	return false
}

// MutateClassic applies the policy's classic mutate rules to the request's
// object, in order, each on the result of the one before, as Kyverno's
// engine does: a rule that changes the object passes ("mutated Kind/name in
// namespace ns"), one that changes nothing is a skip ("no patches
// applied"), preconditions that do not hold are a skip, and a patch that
// cannot be applied is an error. A rule that does not match yields nothing.
// patched is the object after every rule.
func (p *Policy) MutateClassic(ctx context.Context, req *Request) (patched map[string]any, results []RuleResult) {
	obj := req.subject()
	if len(p.mutateRules) == 0 {
		return obj, nil
	}
	e, ok := p.begin(ctx, req)
	if !ok {
		return obj, nil
	}
	e.admission()
	patched = obj
	for _, rule := range p.mutateRules {
		if rule.mutate.existing || !e.ruleMatches(rule) {
			continue
		}
		if rule.matcher == nil { // the rule did not compile
			results = append(results, e.result(rule, Error, rule.Err.Error()))
			continue
		}
		if err := e.ctx.Err(); err != nil {
			results = append(results, e.result(rule, Error, stoppedMessage(err)))
			continue
		}
		r, out := e.mutateRule(rule, patched)
		results = append(results, r)
		if r.Result == Pass {
			patched = out
		}
		if p.Spec.ApplyRules != nil && *p.Spec.ApplyRules == "One" && r.Result == Pass {
			break
		}
	}
	return patched, results
}

// mutateRule applies one matched mutate rule to obj.
func (e *evaluation) mutateRule(rule *Rule, obj map[string]any) (RuleResult, map[string]any) {
	if rule.Err != nil {
		return e.result(rule, Error, rule.Err.Error()), nil
	}
	data := cloneTop(e.baseData())
	setPath(data, "request.object", obj)
	if r, done := e.ruleInputs(rule, data); done {
		return r, nil
	}
	out, status, msg, err := e.mutateWith(rule.mutate, obj, data, 0)
	switch {
	case err != nil:
		return e.result(rule, Error, err.Error()), nil
	case status == Pass:
		return e.result(rule, Pass, mutatedMessage(out)), out
	}
	return e.result(rule, status, msg), nil
}

func mutatedMessage(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	kind, _ := obj["kind"].(string)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	if ns == "" {
		return fmt.Sprintf("mutated %s/%s", kind, name)
	}
	return fmt.Sprintf("mutated %s/%s in namespace %s", kind, name, ns)
}

// mutateForEach applies a list of foreach declarations: each runs over its
// elements on the object the one before produced. The rule passes when
// any declaration changed the object.
func (e *evaluation) mutateForEach(list []*mutateForEach, obj, data map[string]any, depth int) (map[string]any, wgResult, string, error) {
	applied := 0
	for _, fe := range list {
		elements, err := listOf(fe.list, data)
		if err != nil {
			return nil, Error, "", fmt.Errorf("failed to evaluate list %s: %v", fe.list, err)
		}
		out, status, err := e.mutateElements(fe, elements, obj, data, depth)
		if err != nil {
			return nil, Error, "", fmt.Errorf("failed to mutate elements: %w", err)
		}
		if status != Skip {
			applied++
			if status == Pass {
				obj = out
				data = cloneTop(data)
				setPath(data, "request.object", obj)
			}
		}
	}
	msg := fmt.Sprintf("%d elements processed", applied)
	if applied == 0 {
		return obj, Skip, msg, nil
	}
	return obj, Pass, msg, nil
}

type wgResult = wgv1alpha2.Result

// mutateElements applies one foreach declaration to each of its elements,
// in reverse order for a patchStrategicMerge (unless order says otherwise),
// each on the object the element before produced.
func (e *evaluation) mutateElements(fe *mutateForEach, elements []any, obj, data map[string]any, depth int) (map[string]any, wgResult, error) {
	reverse := fe.overlay != nil
	if fe.descending != nil {
		reverse = *fe.descending
	}
	patched := obj
	for n := range elements {
		i := n
		if reverse {
			i = len(elements) - 1 - n
		}
		el := elements[i]
		if el == nil {
			continue
		}
		if err := e.ctx.Err(); err != nil {
			return nil, Error, errors.New(stoppedMessage(err))
		}
		d := cloneTop(data)
		d["element"] = el
		d["elementIndex"] = i
		d["element"+strconv.Itoa(depth)] = el
		d["elementIndex"+strconv.Itoa(depth)] = i
		if err := e.loadContext(fe.context, d); err != nil {
			return nil, Error, fmt.Errorf("failed to load to mutate.foreach[%d].context: %w", i, err)
		}
		if fe.preconditions != nil {
			ok, _, err := conditions.AnyAll(fe.preconditions, d, conditions.Preconditions)
			if err != nil {
				return nil, Error, fmt.Errorf("failed to evaluate mutate.foreach[%d].preconditions: %w", i, err)
			}
			if !ok {
				continue
			}
		}
		out, status, _, err := e.mutateWith(&fe.mutation, patched, d, depth+1)
		if err != nil {
			return nil, Error, err
		}
		if status == Pass {
			patched = out
		}
	}
	if !reflect.DeepEqual(patched, obj) {
		return patched, Pass, nil
	}
	return obj, Skip, nil
}

// applyPatch substitutes the variables of a patch and applies it to obj.
func applyPatch(m *mutation, obj, data map[string]any) (map[string]any, error) {
	switch {
	case m.overlay != nil:
		overlay, err := variables.Substitute(m.overlay, data)
		if err != nil {
			return nil, fmt.Errorf("variable substitution failed: %w", err)
		}
		out, err := StrategicMerge(obj, overlay)
		if err != nil {
			return nil, fmt.Errorf("failed to patch resource: %w", err)
		}
		return out, nil
	case m.json6902 != "":
		text, err := variables.SubstituteString(m.json6902, data)
		if err != nil {
			return nil, fmt.Errorf("variable substitution failed: %w", err)
		}
		out, err := applyJSON6902(obj, text)
		if err != nil {
			return nil, fmt.Errorf("failed to patch resource: %w", err)
		}
		return out, nil
	}
	return nil, errors.New("empty mutate rule")
}

// jsonPatchOf reads RFC 6902 operations written as JSON or YAML.
func jsonPatchOf(text string) (jsonpatch.Patch, error) {
	raw := []byte(strings.TrimSpace(text))
	if len(raw) == 0 || raw[0] != '[' {
		var err error
		if raw, err = sigsyaml.YAMLToJSON(raw); err != nil {
			return nil, fmt.Errorf("patchesJson6902 is neither JSON nor YAML: %w", err)
		}
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, fmt.Errorf("failed to decode patches: %w", err)
	}
	return p, nil
}

func applyJSON6902(obj map[string]any, text string) (map[string]any, error) {
	p, err := jsonPatchOf(text)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	opts := jsonpatch.NewApplyOptions()
	opts.SupportNegativeIndices = true
	opts.AllowMissingPathOnRemove = true
	opts.EnsurePathExistsOnAdd = true
	out, err := p.ApplyWithOptions(doc, opts)
	if err != nil {
		return nil, err
	}
	return decodeObject(out)
}

func decodeObject(raw []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// StrategicMerge applies a patchStrategicMerge overlay, anchors included,
// to an object: the anchors are resolved against the object (prepareOverlay),
// then the overlay is merged with Kubernetes' strategic merge rules (lists
// of named elements merged by name, $patch directives) by kustomize's kyaml.
func StrategicMerge(obj map[string]any, overlay any) (map[string]any, error) {
	prepared, err := prepareOverlay(overlay, obj)
	if err != nil {
		var miss *anchorMiss
		if !errors.As(err, &miss) {
			return nil, fmt.Errorf("failed to preProcess rule: %w", err)
		}
		prepared = map[string]any{} // a condition that does not hold: nothing to patch
	}
	base, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	patch, err := json.Marshal(prepared)
	if err != nil {
		return nil, err
	}
	baseNode, err := kyaml.Parse(string(base))
	if err != nil {
		return nil, err
	}
	patchNode, err := kyaml.Parse(string(patch))
	if err != nil {
		return nil, err
	}
	merged, err := merge2.Merge(patchNode, baseNode, kyaml.MergeOptions{ListIncreaseDirection: kyaml.MergeOptionsListPrepend})
	if err != nil {
		return nil, err
	}
	if merged == nil {
		return map[string]any{}, nil
	}
	out, err := merged.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return decodeObject(out)
}

func compileMutateRule(raw kyvernov1.Rule) *Rule {
	r := compileCLIRule(raw, func(r *Rule) error {
		var err error
		if r.mutate, err = compileMutation(raw.Mutate.Raw); err != nil {
			return err
		}
		return r.checkVariables()
	})
	if r.mutate == nil {
		r.mutate = &mutation{} // a rule that did not compile: its error is its result
	}
	return r
}

// compileCLIRule compiles a rule the CLI applies (mutate, generate): its
// match, its preconditions, then its own body. A rule that does not
// compile keeps the error, and gives error results where it matches.
func compileCLIRule(raw kyvernov1.Rule, body func(*Rule) error) *Rule {
	r := &Rule{Name: raw.Name, Raw: raw}
	err := func() error {
		var err error
		if r.matcher, err = match.Compile(raw.Match, raw.Exclude); err != nil {
			return err
		}
		if r.preconditions, err = decode(raw.Preconditions, "preconditions"); err != nil {
			return err
		}
		return body(r)
	}()
	if err != nil {
		r.Err = fmt.Errorf("rule %s: %w", raw.Name, err)
	}
	return r
}

// targetSpec is one entry of a mutateExisting rule's targets.
type targetSpec struct {
	APIVersion string                `json:"apiVersion"`
	Kind       string                `json:"kind"`
	Name       string                `json:"name"`
	Namespace  string                `json:"namespace"`
	Selector   *metav1.LabelSelector `json:"selector"`
}

// TargetResult is a mutateExisting rule's outcome on one target: Target is
// the target as the rule left it (nil when the rule did not reach one).
type TargetResult struct {
	RuleResult
	Target map[string]any
}

// MutatesExisting says whether the policy has mutateExisting rules.
func (p *Policy) MutatesExisting() bool {
	for _, r := range p.mutateRules {
		if r.mutate.existing {
			return true
		}
	}
	return false
}

// MutateExisting applies the policy's mutateExisting rules that the
// request's object triggers to the targets they select among existing (the
// cluster's resources: a test's targetResources), as Kyverno's background
// controller does: per target, its context and preconditions, then the
// patch, with the target as {{target}}. A target the patch changes passes
// ("mutated Kind/name in namespace ns"), one it leaves as it was is a skip.
func (p *Policy) MutateExisting(ctx context.Context, req *Request, existing []map[string]any) []TargetResult {
	if !p.MutatesExisting() {
		return nil
	}
	e, ok := p.begin(ctx, req)
	if !ok {
		return nil
	}
	e.admission()
	var out []TargetResult
	for _, rule := range p.mutateRules {
		if rule.mutate.existing && rule.matcher != nil && e.ruleMatches(rule) {
			out = append(out, e.mutateTargets(rule, existing)...)
		}
	}
	return out
}

func (e *evaluation) mutateTargets(rule *Rule, existing []map[string]any) []TargetResult {
	one := func(r RuleResult) []TargetResult { return []TargetResult{{RuleResult: r}} }
	if rule.Err != nil {
		return one(e.result(rule, Error, rule.Err.Error()))
	}
	data := cloneTop(e.baseData())
	if r, done := e.ruleInputs(rule, data); done {
		return one(r)
	}
	var out []TargetResult
	for i, target := range rule.mutate.targets {
		resolved, err := variables.Substitute(target.selector, data)
		if err != nil {
			out = append(out, one(e.result(rule, Error, fmt.Sprintf("failed to substitute variables in target[%d]: %v", i, err)))...)
			continue
		}
		var spec targetSpec
		b, _ := json.Marshal(resolved)
		if err := json.Unmarshal(b, &spec); err != nil {
			out = append(out, one(e.result(rule, Error, fmt.Sprintf("target[%d]: %v", i, err)))...)
			continue
		}
		if e.policy.Namespace != "" {
			spec.Namespace = e.policy.Namespace
		}
		for _, t := range existing {
			if !spec.selects(t) {
				continue
			}
			d := cloneTop(data)
			d["target"] = t
			if err := e.loadContext(target.context, d); err != nil {
				out = append(out, TargetResult{RuleResult: e.result(rule, Error, "failed to load context: "+err.Error()), Target: t})
				continue
			}
			if target.preconditions != nil {
				if r, done := e.preconditions(rule, target.preconditions, d); done {
					out = append(out, TargetResult{RuleResult: r, Target: t})
					continue
				}
			}
			patched, status, msg, err := e.mutateWith(rule.mutate, t, d, 0)
			switch {
			case err != nil:
				out = append(out, TargetResult{RuleResult: e.result(rule, Error, err.Error()), Target: t})
			case status == Pass:
				out = append(out, TargetResult{RuleResult: e.result(rule, Pass, mutatedMessage(patched)), Target: patched})
			default:
				out = append(out, TargetResult{RuleResult: e.result(rule, status, msg), Target: t})
			}
		}
	}
	return out
}

// mutateWith applies a mutation (a patch, or foreach declarations at
// depth) to obj: a pass with the changed object, a skip when nothing
// changed ("no patches applied"; foreach: "N elements processed").
func (e *evaluation) mutateWith(m *mutation, obj, data map[string]any, depth int) (map[string]any, wgResult, string, error) {
	if len(m.foreach) > 0 {
		return e.mutateForEach(m.foreach, obj, data, depth)
	}
	out, err := applyPatch(m, obj, data)
	if err != nil {
		return nil, Error, "", err
	}
	if reflect.DeepEqual(out, obj) {
		return obj, Skip, "no patches applied", nil
	}
	return out, Pass, "", nil
}

// compileTarget splits a targets entry: its context and preconditions are
// evaluated per target, the rest selects the targets.
func compileTarget(raw json.RawMessage) (mutateTarget, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return mutateTarget{}, err
	}
	t := mutateTarget{selector: m, preconditions: m["preconditions"]}
	delete(m, "preconditions")
	if c, ok := m["context"]; ok {
		b, _ := json.Marshal(c)
		if err := json.Unmarshal(b, &t.context); err != nil {
			return mutateTarget{}, fmt.Errorf("context: %w", err)
		}
		delete(m, "context")
	}
	return t, nil
}

// selects says whether a target entry names an existing resource: its
// apiVersion and kind, its name and namespace (wildcards allowed; empty
// matches any), its label selector.
func (s *targetSpec) selects(obj map[string]any) bool {
	if av, _ := obj["apiVersion"].(string); av != s.APIVersion {
		return false
	}
	if k, _ := obj["kind"].(string); k != s.Kind {
		return false
	}
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	if s.Name != "" && !wildcard.Match(s.Name, name) {
		return false
	}
	if s.Namespace != "" && !wildcard.Match(s.Namespace, ns) {
		return false
	}
	if s.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.Selector)
		if err != nil || !sel.Matches(labels.Set(stringMap(md["labels"]))) {
			return false
		}
	}
	return true
}

// MutateExistingRule says whether a rule name (autogen names included) is a
// mutateExisting rule of the policy.
func (p *Policy) MutateExistingRule(name string) bool {
	for _, r := range p.mutateRules {
		if r.mutate.existing && RuleNamed(r.Name, name) {
			return true
		}
	}
	return false
}
