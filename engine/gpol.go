package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine/cel"
)

// The kinds of Kyverno's GeneratingPolicies.
const (
	KindGeneratingPolicy           = "GeneratingPolicy"
	KindNamespacedGeneratingPolicy = "NamespacedGeneratingPolicy"
	// MessageGenerated is the message of a GeneratingPolicy that ran.
	MessageGenerated = "policy evaluated successfully"
)

// generatingPolicySpec is the part of a GeneratingPolicy's spec tally
// reads; the rest (evaluation, webhookConfiguration, ...) is how Kyverno's
// controllers act on it, not what it generates.
type generatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		MatchConstraints *admissionregistrationv1.MatchResources  `json:"matchConstraints,omitempty"`
		MatchConditions  []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`
		Variables        []admissionregistrationv1.Variable       `json:"variables,omitempty"`
		Generation       []struct {
			Expression string `json:"expression,omitempty"`
			Template   *struct {
				Value       string `json:"value"`
				Interpolate string `json:"interpolate,omitempty"`
			} `json:"template,omitempty"`
		} `json:"generate"`
	} `json:"spec"`
}

type celGenerator struct {
	match *constraints
	prog  *cel.Program
	// templates are the resources of the generate entries written as YAML
	// templates (without interpolation), by namespace as they are applied.
	templates []map[string]any
}

// CompileGeneratingPolicy compiles a GeneratingPolicy (or its namespaced
// kind) for the CLI, which reports the resources it would generate, as
// Kyverno's CLI does. Its generate expressions are evaluated in order, with
// Kyverno's generator library (generator.Apply).
func CompileGeneratingPolicy(raw []byte) (*Policy, error) {
	var gp generatingPolicy
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&gp); err != nil {
		return nil, fmt.Errorf("%s: %w", KindGeneratingPolicy, err)
	}
	p := newCELPolicy(&gp.ObjectMeta, gp.Kind, KindGeneratingPolicy, KindNamespacedGeneratingPolicy, policiesv1.SourceGeneratingPolicy)
	if p.Kind == KindNamespacedGeneratingPolicy && p.Namespace == "" {
		gp.Namespace = "default"
		p = newCELPolicy(&gp.ObjectMeta, gp.Kind, KindGeneratingPolicy, KindNamespacedGeneratingPolicy, policiesv1.SourceGeneratingPolicy)
	}
	if gp.Spec.MatchConstraints == nil {
		return nil, fmt.Errorf("%s %s: spec.matchConstraints is required", p.Kind, p.Name)
	}
	if len(gp.Spec.Generation) == 0 {
		return nil, fmt.Errorf("%s %s: spec.generate: at least one expression is required", p.Kind, p.Name)
	}
	spec := cel.Spec{
		Mode:            cel.ModeGenerate,
		Namespaced:      p.Namespace != "",
		Variables:       gp.Spec.Variables,
		MatchConditions: gp.Spec.MatchConditions,
	}
	var templates []map[string]any
	for i, g := range gp.Spec.Generation {
		switch {
		case g.Template != nil && g.Expression != "":
			return nil, fmt.Errorf("%s %s: spec.generate[%d]: only one of expression or template may be set", p.Kind, p.Name, i)
		case g.Template != nil:
			if g.Template.Interpolate != "" && g.Template.Interpolate != "None" && g.Template.Interpolate != "none" {
				return nil, fmt.Errorf("%s %s: spec.generate[%d].template.interpolate %q: interpolated templates are not supported by tally yet", p.Kind, p.Name, i, g.Template.Interpolate)
			}
			docs, err := templateDocuments(g.Template.Value)
			if err != nil {
				return nil, fmt.Errorf("%s %s: spec.generate[%d].template.value: %w", p.Kind, p.Name, i, err)
			}
			for _, d := range docs {
				ns, _ := d["metadata"].(map[string]any)["namespace"].(string)
				if p.Namespace != "" && ns != "" && ns != p.Namespace {
					return nil, fmt.Errorf("%s %s: spec.generate[%d]: cross-namespace generation denied: a policy in namespace %q cannot generate resources into namespace %q", p.Kind, p.Name, i, p.Namespace, ns)
				}
			}
			templates = append(templates, docs...)
		case g.Expression == "":
			return nil, fmt.Errorf("%s %s: spec.generate[%d]: one of expression or template must be set", p.Kind, p.Name, i)
		default:
			spec.Validations = append(spec.Validations, admissionregistrationv1.Validation{Expression: g.Expression})
		}
	}
	c, err := compileConstraints(gp.Spec.MatchConstraints)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", p.Kind, p.Name, err)
	}
	prog, err := cel.Compile(spec)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", p.Kind, p.Name, err)
	}
	p.gpol = &celGenerator{match: c, prog: prog, templates: templates}
	return p, nil
}

// GeneratesCEL says whether the policy is a GeneratingPolicy.
func (p *Policy) GeneratesCEL() bool { return p != nil && p.gpol != nil }

// collected gathers what generator.Apply generates in one evaluation.
type collected struct {
	mu   sync.Mutex
	objs []map[string]any
}

func (c *collected) Generate(_ context.Context, namespace string, objs []map[string]any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, obj := range objs {
		u := &unstructured.Unstructured{Object: deepCopyJSON(obj).(map[string]any)}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return err
			}
			for i := range list.Items {
				list.Items[i].SetNamespace(namespace)
				c.objs = append(c.objs, list.Items[i].Object)
			}
			continue
		}
		u.SetNamespace(namespace)
		c.objs = append(c.objs, u.Object)
	}
	return nil
}

// GenerateCEL evaluates a GeneratingPolicy on the request's object (the
// trigger), as Kyverno's CLI does: nothing when its match constraints or
// conditions do not select it; a skip (or pass) when an exception exempts
// it; an error when an expression fails; else a pass ("policy evaluated
// successfully") with the resources its generate expressions generated.
func (p *Policy) GenerateCEL(ctx context.Context, req *Request) (GenerateResult, bool) {
	if p.gpol == nil {
		return GenerateResult{}, false
	}
	e, ok := p.begin(ctx, req)
	if !ok {
		return GenerateResult{}, false
	}
	ctx = e.ctx
	if !p.gpol.match.matches(&e.res, req.resource(), req.operation(), req.NamespaceLabels) {
		return GenerateResult{}, false
	}
	in, done, exempt := e.celExceptions(KindGeneratingPolicy, false)
	if exempt {
		return GenerateResult{RuleResult: done}, true
	}
	sink := &collected{}
	copied := *in
	copied.Generator = sink
	o := p.gpol.prog.Evaluate(ctx, &copied)
	switch {
	case o.NotMet:
		return GenerateResult{}, false
	case o.ConditionErr != nil:
		return GenerateResult{RuleResult: e.vpolResult(Error, "", "failed to evaluate policy: "+o.ConditionErr.Error(), nil)}, true
	case o.Err != nil:
		return GenerateResult{RuleResult: e.vpolResult(Error, "", "failed to evaluate policy: "+o.Err.Error(), nil)}, true
	}
	for _, t := range p.gpol.templates {
		ns, _ := t["metadata"].(map[string]any)["namespace"].(string)
		if ns == "" {
			ns = p.Namespace
		}
		if err := sink.Generate(ctx, ns, []map[string]any{t}); err != nil {
			return GenerateResult{RuleResult: e.vpolResult(Error, "", "failed to evaluate policy: failed to generate resources: "+err.Error(), nil)}, true
		}
	}
	return GenerateResult{RuleResult: e.vpolResult(Pass, "", MessageGenerated, nil), Generated: sink.objs}, true
}

// templateDocuments reads a template's YAML documents: each an object with
// metadata.
func templateDocuments(value string) ([]map[string]any, error) {
	var out []map[string]any
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(value), 4096)
	for i := 1; ; i++ {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if obj == nil {
			continue
		}
		if _, ok := obj["metadata"].(map[string]any); !ok {
			return nil, fmt.Errorf("document %d has no metadata", i)
		}
		out = append(out, obj)
	}
}
