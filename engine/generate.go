package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/variables"
)

// Classic generate rules (data, clone, cloneList, foreach) are applied by
// the CLI (tally test), as Kyverno's CLI applies them: the resources a rule
// would create for a trigger. The background scan and the reports never
// evaluate them (R46).

// generation is a compiled generate body: its pattern is kept as JSON
// values, its variables substituted per trigger.
type generation struct {
	pattern map[string]any
	foreach []generateForEach
}

type generateForEach struct {
	list          string
	context       []kyvernov1.ContextEntry
	preconditions any
	pattern       map[string]any
}

// generatePattern is a generate pattern once its variables are substituted.
type generatePattern struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Name       string         `json:"name"`
	Namespace  string         `json:"namespace"`
	Data       map[string]any `json:"data"`
	Clone      struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"clone"`
	CloneList struct {
		Namespace string                `json:"namespace"`
		Kinds     []string              `json:"kinds"`
		Selector  *metav1.LabelSelector `json:"selector"`
	} `json:"cloneList"`
}

func compileGeneration(raw []byte) (*generation, error) {
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	g := &generation{pattern: body}
	if list, ok := body["foreach"].([]any); ok {
		for i, item := range list {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("generate.foreach[%d] is not an object", i)
			}
			fe := generateForEach{pattern: m, preconditions: m["preconditions"]}
			fe.list, _ = m["list"].(string)
			if fe.list == "" {
				return nil, fmt.Errorf("generate.foreach[%d]: list is required", i)
			}
			if c, ok := m["context"]; ok {
				b, _ := json.Marshal(c)
				if err := json.Unmarshal(b, &fe.context); err != nil {
					return nil, fmt.Errorf("generate.foreach[%d].context: %w", i, err)
				}
			}
			g.foreach = append(g.foreach, fe)
		}
	}
	return g, nil
}

func compileGenerateRule(raw kyvernov1.Rule) *Rule {
	return compileCLIRule(raw, func(r *Rule) error {
		var err error
		r.generate, err = compileGeneration(raw.Generate.Raw)
		return err
	})
}

// GenerateResult is a generate rule's outcome for a trigger, and the
// resources it would create.
type GenerateResult struct {
	RuleResult
	Generated []map[string]any
}

// Generates says whether the policy has classic generate rules.
func (p *Policy) Generates() bool { return p != nil && len(p.generateRules) > 0 }

// GenerateRule says whether a rule name is a generate rule of the policy.
func (p *Policy) GenerateRule(name string) bool {
	for _, r := range p.generateRules {
		if r.Name == name { // generate rules get no autogen rules
			return true
		}
	}
	return false
}

// GenerateClassic applies the policy's generate rules to the request's
// object (the trigger): per matching rule, its context and preconditions
// (a skip when they do not hold), then the resources its data, clone or
// cloneList would create (a pass). Clone sources are looked up among
// sources (a test's cloneSourceResource documents); a missing one is an
// error.
func (p *Policy) GenerateClassic(ctx context.Context, req *Request, sources []map[string]any) []GenerateResult {
	if len(p.generateRules) == 0 {
		return nil
	}
	e, ok := p.begin(ctx, req)
	if !ok {
		return nil
	}
	e.admission()
	var out []GenerateResult
	for _, rule := range p.generateRules {
		if e.ruleMatches(rule) {
			out = append(out, e.generateRule(rule, sources))
		}
	}
	return out
}

func (e *evaluation) generateRule(rule *Rule, sources []map[string]any) GenerateResult {
	fail := func(msg string) GenerateResult { return GenerateResult{RuleResult: e.result(rule, Error, msg)} }
	if rule.Err != nil {
		return fail(rule.Err.Error())
	}
	data := cloneTop(e.baseData())
	if r, done := e.ruleInputs(rule, data); done {
		return GenerateResult{RuleResult: r}
	}
	g := rule.generate
	var generated []map[string]any
	if len(g.foreach) == 0 {
		objs, err := generateFrom(g.pattern, data, sources)
		if err != nil {
			return fail(err.Error())
		}
		generated = objs
	}
	for i, fe := range g.foreach {
		elements, err := listOf(fe.list, data)
		if err != nil {
			return fail(fmt.Sprintf("failed to evaluate %d foreach list: %v", i, err))
		}
		for j, el := range elements {
			if el == nil {
				continue
			}
			d := cloneTop(data)
			d["element"], d["elementIndex"], d["element0"], d["elementIndex0"] = el, j, el, j
			if err := e.loadContext(fe.context, d); err != nil {
				return fail(fmt.Sprintf("failed to process %d foreach in rule %s: failed to load context: %v", i, rule.Name, err))
			}
			if fe.preconditions != nil {
				ok, _, err := conditions.AnyAll(fe.preconditions, d, conditions.Preconditions)
				if err != nil {
					return fail(fmt.Sprintf("failed to process %d foreach in rule %s: %v", i, rule.Name, err))
				}
				if !ok {
					continue
				}
			}
			objs, err := generateFrom(fe.pattern, d, sources)
			if err != nil {
				return fail(fmt.Sprintf("failed to process %d foreach in rule %s: %v", i, rule.Name, err))
			}
			generated = append(generated, objs...)
		}
	}
	return GenerateResult{RuleResult: e.result(rule, Pass, ""), Generated: generated}
}

// generateFrom gives the resources one generate pattern creates.
func generateFrom(pattern map[string]any, data map[string]any, sources []map[string]any) ([]map[string]any, error) {
	body := make(map[string]any, len(pattern))
	for k, v := range pattern {
		if k != "foreach" && k != "context" && k != "preconditions" && k != "list" {
			body[k] = v
		}
	}
	resolved, err := variables.Substitute(body, data)
	if err != nil {
		return nil, fmt.Errorf("variable substitution failed: %w", err)
	}
	raw, _ := json.Marshal(resolved)
	var p generatePattern
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	switch {
	case p.Clone.Name != "":
		if p.Clone.Namespace == p.Namespace && p.Clone.Name == p.Name {
			return nil, nil // a resource is not cloned onto itself
		}
		src := findSource(sources, p.APIVersion, p.Kind, p.Clone.Namespace, p.Clone.Name)
		if src == nil {
			return nil, fmt.Errorf("source resource %s %s/%s not found", p.Kind, p.Clone.Namespace, p.Clone.Name)
		}
		return []map[string]any{cloneOnto(src, p.APIVersion, p.Kind, p.Namespace, p.Name)}, nil
	case len(p.CloneList.Kinds) > 0:
		var out []map[string]any
		for _, k := range p.CloneList.Kinds {
			apiVersion, kind := splitKind(k)
			for _, src := range sources {
				av, _ := src["apiVersion"].(string)
				sk, _ := src["kind"].(string)
				if sk != kind || (apiVersion != "" && av != apiVersion) || namespaceOfObject(src) != p.CloneList.Namespace {
					continue
				}
				if !selected(p.CloneList.Selector, src) || namespaceOfObject(src) == p.Namespace {
					continue
				}
				out = append(out, cloneOnto(src, av, sk, p.Namespace, nameOfObject(src)))
			}
		}
		return out, nil
	}
	obj := map[string]any{}
	if p.Data != nil {
		obj = deepCopyJSON(p.Data).(map[string]any)
	}
	setTarget(obj, p.APIVersion, p.Kind, p.Namespace, p.Name)
	return []map[string]any{obj}, nil
}

// cloneOnto copies a clone source as the generated resource: named as the
// target, without what the API server gave the source (uid,
// resourceVersion, creationTimestamp, managedFields, selfLink), and without
// owners when it moves to another namespace.
func cloneOnto(src map[string]any, apiVersion, kind, namespace, name string) map[string]any {
	obj := deepCopyJSON(src).(map[string]any)
	md, _ := obj["metadata"].(map[string]any)
	if md != nil {
		for _, k := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink"} {
			delete(md, k)
		}
		if ns, _ := md["namespace"].(string); ns != namespace {
			delete(md, "ownerReferences")
		}
	}
	setTarget(obj, apiVersion, kind, namespace, name)
	return obj
}

func setTarget(obj map[string]any, apiVersion, kind, namespace, name string) {
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		obj["metadata"] = md
	}
	md["name"] = name
	if namespace != "" {
		md["namespace"] = namespace
	} else {
		delete(md, "namespace")
	}
	if kind != "" {
		obj["kind"] = kind
	}
	obj["apiVersion"] = apiVersion
}

func findSource(sources []map[string]any, apiVersion, kind, namespace, name string) map[string]any {
	for _, s := range sources {
		av, _ := s["apiVersion"].(string)
		k, _ := s["kind"].(string)
		if av == apiVersion && k == kind && namespaceOfObject(s) == namespace && nameOfObject(s) == name {
			return s
		}
	}
	return nil
}

// splitKind reads a cloneList kind: "v1/Secret", "apps/v1/Deployment" or "Secret".
func splitKind(k string) (apiVersion, kind string) {
	i := strings.LastIndex(k, "/")
	if i < 0 {
		return "", k
	}
	return k[:i], k[i+1:]
}

func selected(sel *metav1.LabelSelector, obj map[string]any) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	md, _ := obj["metadata"].(map[string]any)
	return s.Matches(labels.Set(stringMap(md["labels"])))
}

func namespaceOfObject(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	return ns
}

func nameOfObject(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	n, _ := md["name"].(string)
	return n
}
