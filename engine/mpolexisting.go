package engine

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine/cel"
)

// mutateExisting is how a MutatingPolicy with mutateExisting enabled
// chooses its targets among the existing resources: the objects
// targetMatchConstraints.expression resolves from the trigger, or else the
// resources its resource rules select (targetMatchConstraints' when it has
// some, matchConstraints' otherwise), whatever the operation, as Kyverno's
// background controller and CLI choose them.
type mutateExisting struct {
	expr  *cel.Program // Extras[0] is the expression; nil without one
	match *constraints
}

const targetExpressionPath = "spec.targetMatchConstraints.expression"

func compileMutateExisting(spec policiesv1.MutatingPolicySpec, namespaced bool) (*mutateExisting, error) {
	x := &mutateExisting{}
	tc := spec.TargetMatchConstraints
	if tc != nil && tc.Expression != "" {
		prog, err := cel.Compile(cel.Spec{
			Mode:       cel.ModeKyverno,
			Namespaced: namespaced,
			Variables:  spec.Variables,
			Extras:     []admissionregistrationv1.Variable{{Name: targetExpressionPath, Expression: tc.Expression}},
		})
		if prog == nil {
			return nil, err
		}
		if errs := prog.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("%s: %w", targetExpressionPath, errs[len(errs)-1])
		}
		x.expr = prog
		return x, nil
	}
	constraints := spec.MatchConstraints
	if tc != nil && len(tc.ResourceRules) > 0 {
		constraints = &tc.MatchResources
	}
	if constraints != nil {
		// Operations do not choose targets: every rule is for any.
		c := constraints.DeepCopy()
		for i := range c.ResourceRules {
			c.ResourceRules[i].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
		}
		for i := range c.ExcludeResourceRules {
			c.ExcludeResourceRules[i].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
		}
		constraints = c
	}
	m, err := compileConstraints(constraints)
	if err != nil {
		return nil, fmt.Errorf("spec.targetMatchConstraints: %w", err)
	}
	x.match = m
	return x, nil
}

// MutatesExistingTargets says whether the policy is a MutatingPolicy that
// mutates existing resources (spec.evaluation.mutateExisting.enabled).
func (p *Policy) MutatesExistingTargets() bool {
	return p != nil && p.mpol != nil && p.mpol.existing != nil
}

// MutateTargets applies a mutateExisting MutatingPolicy, triggered by the
// request, to the targets it chooses among existing (a test's
// targetResources), as Kyverno's CLI does: per target its
// targetMatchConditions, its exceptions, then the mutations with the
// target as `object`. A mutated target passes ("success") with the target
// as mutated; one whose conditions do not hold is a skip. An expression
// that cannot be evaluated is one error result with no target.
func (p *Policy) MutateTargets(ctx context.Context, trigger *Request, existing []map[string]any) []TargetResult {
	if !p.MutatesExistingTargets() {
		return nil
	}
	x, m := p.mpol.existing, p.mpol
	e, ok := p.begin(ctx, trigger)
	if !ok {
		return nil
	}
	var keys map[string]bool
	if x.expr != nil {
		in := *trigger.celInput()
		in.OwnNamespace = p.Namespace // R47
		v, err := x.expr.Extra(e.ctx, &in, 0)
		if err == nil {
			keys, err = targetKeys(v)
		}
		if err != nil {
			return []TargetResult{{RuleResult: e.vpolResult(Error, RuleEvaluation, fmt.Sprintf("%s: %v", targetExpressionPath, err), nil)}}
		}
	}
	var out []TargetResult
	for _, t := range existing {
		treq := &Request{
			Object: t, UserInfo: trigger.UserInfo, CELExceptions: trigger.CELExceptions,
			Data: trigger.Data, Loader: trigger.Loader, Values: trigger.Values,
		}
		te, ok := p.begin(ctx, treq)
		if !ok {
			continue
		}
		gvr := treq.resource()
		if keys != nil {
			if !keys[targetKey(te.res.Namespace, te.res.Name)] {
				continue
			}
		} else if !x.match.matches(&te.res, gvr, "", nil) {
			continue
		}
		if _, done, exempt := te.celExceptions(m.kind, m.ignore); exempt {
			out = append(out, TargetResult{RuleResult: done, Target: t})
			continue
		}
		_, after, r, ok := m.mutateWith(te, gvr, nil, m.targetMatcher)
		if !ok {
			r.ConditionsNotMet = false
			out = append(out, TargetResult{RuleResult: r, Target: t})
			continue
		}
		out = append(out, TargetResult{RuleResult: te.vpolResult(Pass, "", MessageMutationApplied, nil), Target: after})
	}
	return out
}

// targetKeys are the namespace/name keys of what a target expression
// resolved: one object, or a list's items.
func targetKeys(v any) (map[string]bool, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must resolve to an object or a list of objects, not %T", v)
	}
	keys := map[string]bool{}
	add := func(o map[string]any) {
		md, _ := o["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		name, _ := md["name"].(string)
		keys[targetKey(ns, name)] = true
	}
	if items, ok := obj["items"].([]any); ok {
		for _, it := range items {
			if o, ok := it.(map[string]any); ok {
				add(o)
			}
		}
		return keys, nil
	}
	add(obj)
	return keys, nil
}

func targetKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}
