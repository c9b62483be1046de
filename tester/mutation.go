package tester

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sort"

	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
)

// mutatingPolicy reports whether an expectation names a MutatingPolicy:
// tally evaluates those (R44), patchedResources included.
func (l *loaded) mutatingPolicy(tr TestResult) bool {
	pi := l.policyIndexFor(tr)
	return pi >= 0 && l.policies[pi].Policy.Mutating()
}

// checkMutation decides an expectation of a MutatingPolicy as Kyverno's CLI
// does: the policy is applied to the resource (pass when its mutations
// apply, skip when its match conditions are not met, error when a mutation
// cannot be applied), and the mutated resource must equal the test's
// patchedResources document of the same kind and name.
func (l *loaded) checkMutation(ctx context.Context, o *Outcome, tr TestResult, lp *LoadedPolicy) {
	var expectedDocs []Document
	if tr.PatchedResources != "" {
		docs, err := ReadDocuments(filepath.Join(l.dir, tr.PatchedResources))
		if err != nil {
			o.Status, o.Reason = Failed, fmt.Sprintf("patchedResources: %v", err)
			return
		}
		expectedDocs = docs
	}
	if lp.Policy.MutatesExistingTargets() && len(l.targets) > 0 {
		l.checkMutatedTargets(ctx, o, tr, lp, expectedDocs)
		return
	}
	found, responded := false, false
	for _, r := range l.resources {
		if !resourceNamed(r, o.Resource) {
			continue
		}
		found = true
		patched, rr, matched := lp.Policy.Mutate(ctx, l.request(lp, r, tr.Operation()))
		if !matched {
			continue
		}
		responded = true
		if !judgeMutation(o, tr, expectedDocs, rr, patched, r.name) {
			return
		}
	}
	o.settle(found, responded)
}

// judgeMutation records a MutatingPolicy's result on an expectation: a
// result other than the one expected fails it, and a pass's mutated object
// (when there is one) must equal patchedResources. It reports whether the
// expectation still holds.
func judgeMutation(o *Outcome, tr TestResult, expectedDocs []Document, rr engine.RuleResult, mutated map[string]any, name string) bool {
	o.Got = string(rr.Result)
	if o.Got != o.Expected {
		o.Status, o.Reason = Failed, rr.Message
		return false
	}
	if tr.PatchedResources == "" || rr.Result != engine.Pass || mutated == nil {
		return true
	}
	return comparePatched(o, tr, expectedDocs, mutated, name)
}

// checkMutatedTargets decides an expectation of a mutateExisting
// MutatingPolicy with targetResources: every test resource triggers it (as
// in Kyverno's CLI), and the expectation names a target it mutated; an
// error choosing the targets answers every expectation of the policy. The
// policy's resource library reads the targets first, then the test's
// cluster data, as Kyverno's CLI serves them.
func (l *loaded) checkMutatedTargets(ctx context.Context, o *Outcome, tr TestResult, lp *LoadedPolicy, expectedDocs []Document) {
	targets, err := l.targetsData()
	if err != nil {
		o.Status, o.Reason = Failed, "targetResources: "+err.Error()
		return
	}
	found, responded := false, false
	for _, t := range l.targets {
		found = found || resourceNamed(resourceOf(t), o.Resource)
	}
	for _, r := range l.resources {
		found = found || resourceNamed(r, o.Resource)
		req := l.request(lp, r, tr.Operation())
		req.Data = targetsFirst{targets: targets, rest: req.Data}
		for _, tres := range lp.Policy.MutateTargets(ctx, req, l.targets) {
			// An error choosing the targets (no target) answers every
			// expectation of the policy: Kyverno's CLI stops the test there.
			if tres.Target != nil && !resourceNamed(resourceOf(tres.Target), o.Resource) {
				continue
			}
			responded = true
			if !judgeMutation(o, tr, expectedDocs, tres.RuleResult, tres.Target, o.Resource) {
				return
			}
		}
	}
	o.settle(found, responded)
}

// targetsData is the test's targetResources as cluster data, built once.
func (l *loaded) targetsData() (*data.Offline, error) {
	if !l.targetDataSet {
		l.targetData, l.targetDataErr = data.NewOffline(l.targets)
		l.targetDataSet = true
	}
	return l.targetData, l.targetDataErr
}

// targetsFirst serves the resource library from a test's targetResources,
// then from the rest of its cluster data.
type targetsFirst struct {
	targets *data.Offline
	rest    cel.ClusterData
}

func (t targetsFirst) GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	obj, err := t.targets.GetResource(ctx, apiVersion, resource, namespace, name)
	if err == nil || t.rest == nil {
		return obj, err
	}
	return t.rest.GetResource(ctx, apiVersion, resource, namespace, name)
}

func (t targetsFirst) ListResources(ctx context.Context, apiVersion, resource, namespace string) (map[string]any, error) {
	list, err := t.targets.ListResources(ctx, apiVersion, resource, namespace)
	if err != nil || t.rest == nil {
		return list, err
	}
	more, err := t.rest.ListResources(ctx, apiVersion, resource, namespace)
	if err != nil {
		return list, nil
	}
	items, _ := list["items"].([]any)
	extra, _ := more["items"].([]any)
	out := maps.Clone(list)
	out["items"] = append(slices.Clone(items), extra...)
	return out, nil
}

// documentFor finds the document of an object's kind and name, in the
// object's namespace when documents of that name are in several.
func documentFor(docs []Document, obj map[string]any) (map[string]any, bool) {
	name, kind, ns := nameOf(obj), obj["kind"], namespaceOf(obj)
	var found map[string]any
	for _, d := range docs {
		if d.Object["kind"] != kind || nameOf(d.Object) != name {
			continue
		}
		if dns := namespaceOf(d.Object); dns == ns {
			return d.Object, true
		} else if found == nil && (dns == "" || ns == "") {
			found = d.Object
		}
	}
	return found, found != nil
}

func namespaceOf(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	return ns
}

func nameOf(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	return name
}

// normalized is an object in its JSON form (whole numbers alike however
// they were read); when like names no namespace, the object's namespace
// (defaulted when read) is left out.
func normalized(obj, like map[string]any) any {
	out := jsonNumbers(obj)
	if like == nil {
		return out
	}
	lmd, _ := like["metadata"].(map[string]any)
	if _, ok := lmd["namespace"]; !ok {
		if md, ok := out.(map[string]any)["metadata"].(map[string]any); ok {
			delete(md, "namespace")
		}
	}
	return out
}

// jsonNumbers turns every number into an int64 when whole, else a float64.
func jsonNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = jsonNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = jsonNumbers(e)
		}
		return out
	case int:
		return int64(t)
	case int32:
		return int64(t)
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
		return t
	}
	return v
}

// firstDifference is the path of the first difference between two JSON
// values, in sorted key order.
func firstDifference(a, b any, path string) (string, bool) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, d := firstDifference(am[k], bm[k], path+"."+k); d {
				return p, true
			}
		}
		return "", false
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			if p, d := firstDifference(al[i], bl[i], fmt.Sprintf("%s[%d]", path, i)); d {
				return p, true
			}
		}
		return "", false
	}
	if reflect.DeepEqual(a, b) {
		return "", false
	}
	if path == "" {
		path = "."
	}
	return path, true
}
