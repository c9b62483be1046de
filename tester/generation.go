package tester

import (
	"context"

	"fmt"
	"github.com/tally-dev/tally/engine"
	"path/filepath"
	"strings"
)

// classicGeneration says whether an expectation names a classic generate
// rule tally applies.
func (l *loaded) classicGeneration(tr TestResult) bool {
	pi := l.policyIndexFor(tr)
	return pi >= 0 && l.policies[pi].Policy != nil && (l.policies[pi].Policy.GenerateRule(tr.Rule) || l.policies[pi].Policy.GeneratesCEL())
}

// cloneSources reads the clone sources every expectation of the test names
// (cloneSourceResource): what Kyverno's CLI puts in the cluster it
// generates against.
func (l *loaded) cloneSources() ([]map[string]any, error) {
	if l.sources != nil {
		return l.sources, nil
	}
	l.sources = []map[string]any{}
	seen := map[string]bool{}
	for _, tr := range l.test.Results {
		if tr.CloneSource == "" || seen[tr.CloneSource] {
			continue
		}
		seen[tr.CloneSource] = true
		docs, err := ReadDocuments(filepath.Join(l.dir, tr.CloneSource))
		if err != nil {
			return nil, fmt.Errorf("cloneSourceResource: %v", err)
		}
		for _, d := range docs {
			l.sources = append(l.sources, d.Object)
		}
	}
	return l.sources, nil
}

// checkGeneration decides an expectation of a classic generate rule as
// Kyverno's CLI does: the rule's result on the trigger, and each resource
// it would create compared whole with its document in generatedResource
// (or in one of generatedResources), generate labels aside.
func (l *loaded) checkGeneration(ctx context.Context, o *Outcome, tr TestResult, pi int) {
	lp := l.policies[pi]
	var generate func(r resource) []engine.GenerateResult
	if lp.Policy.GeneratesCEL() {
		generate = func(r resource) []engine.GenerateResult {
			if g, ok := lp.Policy.GenerateCEL(ctx, l.request(lp, r, tr.Operation())); ok {
				return []engine.GenerateResult{g}
			}
			return nil
		}
	} else {
		sources, err := l.cloneSources()
		if err != nil {
			o.Status, o.Reason = Failed, err.Error()
			return
		}
		generate = func(r resource) []engine.GenerateResult {
			return lp.Policy.GenerateClassic(ctx, l.request(lp, r, tr.Operation()), sources)
		}
	}
	var files []string
	if tr.GeneratedResource != "" && len(tr.GeneratedList) == 0 {
		files = []string{tr.GeneratedResource}
	}
	files = append(files, tr.GeneratedList...)
	var expected [][]Document
	for _, f := range files {
		docs, err := ReadDocuments(filepath.Join(l.dir, f))
		if err != nil {
			o.Status, o.Reason = Failed, fmt.Sprintf("generated resource: %v", err)
			return
		}
		expected = append(expected, docs)
	}
	found, responded := false, false
	for _, r := range l.resources {
		if !resourceNamed(r, o.Resource) {
			continue
		}
		found = true
		for _, gr := range generate(r) {
			if tr.Rule != "" && gr.Rule != tr.Rule && !lp.Policy.GeneratesCEL() {
				continue
			}
			responded = true
			o.Got = string(gr.Result)
			for _, g := range gr.Generated {
				if reason, ok := matchGenerated(g, expected, files); !ok {
					o.Status, o.Reason = Failed, reason
					return
				}
			}
			if o.Got != o.Expected {
				o.Status, o.Reason = Failed, gr.Message
				return
			}
		}
	}
	o.settle(found, responded)
}

// matchGenerated finds a generated resource among the expected documents
// (by apiVersion, kind, namespace and name) and compares it whole.
func matchGenerated(g map[string]any, expected [][]Document, files []string) (string, bool) {
	if len(files) == 0 {
		return "", true
	}
	last := ""
	for i, docs := range expected {
		want := generatedDoc(docs, g)
		if want == nil {
			last = fmt.Sprintf("%s: the generated %s %s/%s is not found in manifest", files[i], g["kind"], namespaceOf(g), nameOf(g))
			continue
		}
		a, b := tidy(normalized(withGenerateLabels(g), nil)), tidy(normalized(withGenerateLabels(want), nil))
		path, differs := firstDifference(a, b, "")
		if !differs {
			return "", true
		}
		last = fmt.Sprintf("the generated resource differs from %s at %s", files[i], path)
	}
	return last, false
}

func generatedDoc(docs []Document, g map[string]any) map[string]any {
	for _, d := range docs {
		if d.Object["apiVersion"] == g["apiVersion"] && d.Object["kind"] == g["kind"] && nameOf(d.Object) == nameOf(g) && namespaceOf(d.Object) == namespaceOf(g) {
			return d.Object
		}
	}
	return nil
}

// withGenerateLabels is an object with the labels Kyverno's CLI evens out
// before it compares generated resources: generate.kyverno.io/* dropped,
// app.kubernetes.io/managed-by: kyverno set.
func withGenerateLabels(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	md, _ := obj["metadata"].(map[string]any)
	m := make(map[string]any, len(md)+1)
	for k, v := range md {
		m[k] = v
	}
	labels := map[string]any{"app.kubernetes.io/managed-by": "kyverno"}
	if l, ok := md["labels"].(map[string]any); ok {
		for k, v := range l {
			if !strings.HasPrefix(k, "generate.kyverno.io/") {
				labels[k] = v
			}
		}
	}
	m["labels"] = labels
	out["metadata"] = m
	return out
}
