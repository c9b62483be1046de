package tester

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/tally-dev/tally/engine"
)

// classicMutation says whether an expectation names a classic mutate rule
// (patchStrategicMerge, patchesJson6902, foreach) tally applies.
func (l *loaded) classicMutation(tr TestResult) bool {
	pi := l.policyIndexFor(tr)
	if pi < 0 || l.policies[pi].Policy == nil {
		return false
	}
	p := l.policies[pi].Policy
	return p.MutateRule(tr.Rule) || (tr.Rule == "" && p.MutatesClassic())
}

// mutated is what one policy's classic mutate rules did to a resource.
type mutated struct {
	patched map[string]any
	results []engine.RuleResult
}

type mutationKey struct {
	resource, policy int
	op               string
}

// mutatedBy applies the classic mutate rules of the test's policies, in
// the order the test names them, each on what the one before produced (as
// Kyverno's CLI chains them), up to policy pi, and gives pi's part.
func (l *loaded) mutatedBy(ctx context.Context, ri, pi int, op string) mutated {
	key := mutationKey{ri, pi, op}
	if m, ok := l.mutations[key]; ok {
		return m
	}
	if l.mutations == nil {
		l.mutations = map[mutationKey]mutated{}
	}
	r := l.resources[ri]
	var out mutated
	for i, lp := range l.policies[:pi+1] {
		if lp.Policy == nil || lp.Invalid != nil || lp.Unsupported != nil || !lp.Policy.MutatesClassic() {
			continue
		}
		patched, results := lp.Policy.MutateClassic(ctx, l.request(lp, r, op))
		if i == pi {
			out = mutated{patched: patched, results: results}
		}
		r.obj = patched
	}
	l.mutations[key] = out
	return out
}

// checkClassicMutation decides an expectation of a classic mutate rule as
// Kyverno's CLI does: the rule's result (pass when it changed the resource,
// skip when it changed nothing or its preconditions did not hold), and,
// when the test names patchedResources, the resource as the policy left it,
// compared whole with the document of its kind and name there.
func (l *loaded) checkClassicMutation(ctx context.Context, o *Outcome, tr TestResult, pi int) {
	var expectedDocs []Document
	if tr.PatchedResources != "" {
		docs, err := ReadDocuments(filepath.Join(l.dir, tr.PatchedResources))
		if err != nil {
			o.Status, o.Reason = Failed, fmt.Sprintf("patchedResources: %v", err)
			return
		}
		expectedDocs = docs
	}
	if l.policies[pi].Policy.MutateExistingRule(tr.Rule) {
		l.checkMutateExisting(ctx, o, tr, pi, expectedDocs)
		return
	}
	found, responded := false, false
	for ri, r := range l.resources {
		if !resourceNamed(r, o.Resource) {
			continue
		}
		found = true
		m := l.mutatedBy(ctx, ri, pi, tr.Operation())
		got, msg := "", ""
		for _, rr := range m.results {
			if tr.Rule == "" || engine.RuleNamed(rr.Rule, tr.Rule) {
				got, msg = string(rr.Result), rr.Message
				if got != o.Expected {
					break
				}
			}
		}
		if got == "" {
			continue // the rule does not apply to the resource: excluded
		}
		responded = true
		o.Got = got
		if tr.PatchedResources != "" && !comparePatched(o, tr, expectedDocs, m.patched, r.name) {
			return
		}
		if got != o.Expected {
			o.Status, o.Reason = Failed, msg
			return
		}
	}
	o.settle(found, responded)
}

// tidy drops empty maps and lists (and nulls), as Kyverno's CLI does before
// it compares a resource with the expected one.
func tidy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range t {
			if e = tidy(e); e != nil {
				out[k] = e
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		var out []any
		for _, e := range t {
			if e = tidy(e); e != nil {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return v
}

// comparePatched compares a mutated resource with its document in the
// test's patchedResources, whole (after tidy), and says whether the
// expectation may go on; else o says why not.
func comparePatched(o *Outcome, tr TestResult, expectedDocs []Document, patched map[string]any, name string) bool {
	want, ok := documentFor(expectedDocs, patched)
	if !ok {
		o.Status, o.Reason = Failed, fmt.Sprintf("patchedResources %s holds no %s %s", tr.PatchedResources, patched["kind"], name)
		if !tr.FailOnMissingResources {
			// Kyverno's CLI leaves the expectation out: not evaluated, so not a pass.
			o.Status = Skipped
			o.Reason += ": not evaluated (failOnMissingResources is not set)"
		}
		return false
	}
	if path, differs := firstDifference(tidy(normalized(patched, want)), tidy(normalized(want, nil)), ""); differs {
		o.Status, o.Reason = Failed, fmt.Sprintf("the mutated resource differs from patchedResources %s at %s", tr.PatchedResources, path)
		return false
	}
	return true
}

// checkMutateExisting decides an expectation of a mutateExisting rule: the
// test's resources trigger it, and the expectation names the targets (the
// test's targetResources) it mutated, or a trigger for a result the rule
// gave before it reached any target (preconditions, exceptions, errors).
func (l *loaded) checkMutateExisting(ctx context.Context, o *Outcome, tr TestResult, pi int, expectedDocs []Document) {
	lp := l.policies[pi]
	found, responded := false, false
	ruleOf := func(rr engine.RuleResult) bool {
		return tr.Rule == "" || engine.RuleNamed(rr.Rule, tr.Rule)
	}
	for _, t := range l.targets {
		if resourceNamed(resourceOf(t), o.Resource) {
			found = true
		}
	}
	for _, r := range l.resources {
		trigger := resourceNamed(r, o.Resource)
		found = found || trigger
		for _, tres := range lp.Policy.MutateExisting(ctx, l.request(lp, r, tr.Operation()), l.targets) {
			if !ruleOf(tres.RuleResult) {
				continue
			}
			if tres.Target == nil && !trigger || tres.Target != nil && !resourceNamed(resourceOf(tres.Target), o.Resource) {
				continue
			}
			responded = true
			o.Got = string(tres.Result)
			if tres.Target != nil && tr.PatchedResources != "" && !comparePatched(o, tr, expectedDocs, tres.Target, o.Resource) {
				return
			}
			if o.Got != o.Expected {
				o.Status, o.Reason = Failed, tres.Message
				return
			}
		}
	}
	o.settle(found, responded)
}

func resourceOf(obj map[string]any) resource {
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	return resource{obj: obj, name: name, namespace: ns}
}
