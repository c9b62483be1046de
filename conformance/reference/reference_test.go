// Package reference compares tally's final reports with the reference:
// Kyverno 1.19's own reports controller, beside the same real Kyverno
// admission and background controllers, on the same scenario (issue 55).
package reference_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/conformance/harness"
)

// afterPolicies marks the scenario's objects created once the policies
// are in place (through admission).
const afterPolicies = "reference.tally.dev/after-policies"

// key names a result: the resource by kind and name (UIDs differ between
// the runs), the policy and the rule.
type key struct{ Kind, Namespace, Name, Policy, Rule string }

// entry is what is compared of a result.
type entry struct {
	Result, Message, Source, Severity, Category string
	Scored                                      bool
	Properties                                  map[string]string
}

// knownDifference is a difference the comparison accepts, each written in
// docs/known-differences.md (doc is a phrase of it).
type knownDifference struct {
	why   string
	doc   string
	match func(k key, ref, got *entry) bool
}

// knownDifferences are the remaining differences: none yet beyond what
// this list names.
var knownDifferences = []knownDifference{}

func TestReferenceComparison(t *testing.T) {
	if os.Getenv("TALLY_REFERENCE_COMPARISON") == "" {
		t.Skip("set TALLY_REFERENCE_COMPARISON=1 (make test does): it starts the local control plane twice, beside the real Kyverno (hack/kyverno/build.sh)")
	}
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "known-differences.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range knownDifferences {
		if !bytes.Contains(docs, []byte(d.doc)) {
			t.Errorf("known difference %q is not in docs/known-differences.md (%q)", d.why, d.doc)
		}
	}
	objs := scenario(t)
	ref := runScenario(t, objs, true)
	got := runScenario(t, objs, false)

	counts := map[string]*[4]int{} // source: identical, differing, reference only, tally only
	count := func(source string, i int) {
		if counts[source] == nil {
			counts[source] = &[4]int{}
		}
		counts[source][i]++
	}
	var keys []key
	for k := range ref {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := ref[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		r, g := ref[k], got[k]
		source := sourceOf(r, g)
		switch {
		case r != nil && g != nil && fmt.Sprint(*r) == fmt.Sprint(*g):
			count(source, 0)
			continue
		case r != nil && g != nil:
			count(source, 1)
		case r != nil:
			count(source, 2)
		default:
			count(source, 3)
		}
		if d := known(k, r, g); d != nil {
			t.Logf("known difference (%s) at %v:\n  kyverno: %+v\n  tally:   %+v", d.why, k, r, g)
			continue
		}
		t.Errorf("%v:\n  kyverno: %+v\n  tally:   %+v", k, r, g)
	}
	var sources []string
	for s := range counts {
		sources = append(sources, s)
	}
	sort.Strings(sources)
	for _, s := range sources {
		c := counts[s]
		t.Logf("reference comparison, %s: %d identical, %d differing, %d Kyverno's only, %d tally's only", s, c[0], c[1], c[2], c[3])
	}
	if len(ref) == 0 {
		t.Error("Kyverno's reports controller wrote no result: nothing was compared")
	}
	// Every kind of the scenario was compared: each policy (and the
	// autogen rule on the Deployment) has results in the reference.
	for _, want := range []string{"ref-audit", "ref-admission-only", "ref-pods", "ref-pods/autogen-no-privileged", "ref-enforce", "ref-mutate", "ref-generate", "ref-vpol", "ref-mpol", "ref-gpol"} {
		found := false
		for k := range ref {
			if k.Policy == want || k.Policy+"/"+k.Rule == want {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("the reference has no result of %s: the scenario did not exercise it", want)
		}
	}
}

func sourceOf(r, g *entry) string {
	for _, e := range []*entry{r, g} {
		if e != nil && e.Source != "" {
			return e.Source
		}
	}
	return "kyverno"
}

func known(k key, r, g *entry) *knownDifference {
	for i := range knownDifferences {
		if knownDifferences[i].match(k, r, g) {
			return &knownDifferences[i]
		}
	}
	return nil
}

// scenario reads testdata/scenario.yaml.
func scenario(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// runScenario applies the scenario on a new local control plane beside the
// real Kyverno, with Kyverno's reports controller (reference) or tally,
// and returns the final results once they are settled.
func runScenario(t *testing.T, objs []*unstructured.Unstructured, reference bool) map[key]*entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	name := map[bool]string{true: "kyverno-reports", false: "tally"}[reference]
	dir, err := os.MkdirTemp("", "tally-reference-"+name+"-") // kept when the run fails
	if err != nil {
		t.Fatal(err)
	}
	l, err := harness.StartLocal(ctx, dir, harness.LocalOptions{Mode: harness.BesideKyverno, Kyverno: true, KyvernoReports: reference})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer func() {
		if t.Failed() {
			l.KeepLogs()
			t.Logf("%s: logs kept in %s", name, l.Dir())
		}
		_ = l.Stop()
	}()
	dyn, err := dynamic.NewForConfig(l.Config())
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(l.Config())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	create := func(u *unstructured.Unstructured) {
		m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", name, u.GetKind(), u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: create %s %s: %v", name, u.GetKind(), u.GetName(), err)
		}
	}
	isPolicy := func(u *unstructured.Unstructured) bool {
		g := u.GroupVersionKind().Group
		return g == "kyverno.io" || g == "policies.kyverno.io"
	}
	for _, u := range objs {
		if !isPolicy(u) && u.GetLabels()[afterPolicies] != "true" {
			create(u)
		}
	}
	for _, u := range objs {
		if isPolicy(u) {
			create(u)
		}
	}
	// The classic policies Ready (Kyverno writes their status), and the
	// webhooks rules for them in place.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, u := range objs {
			if u.GetKind() != "ClusterPolicy" {
				continue
			}
			p, err := dyn.Resource(apiresources.ClusterPolicy).Get(ctx, u.GetName(), metav1.GetOptions{})
			if err != nil || !ready(p) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: the policies are not Ready: %v", name, err)
	}
	// Kyverno's webhooks follow its policies a moment later: a create that
	// comes first is not reviewed (a GeneratingPolicy then generates
	// nothing). Wait until Kyverno's webhooks send every policy's kinds.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, u := range objs {
			if isPolicy(u) && !l.AdmissionCovered(ctx, u) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: Kyverno's webhooks do not send every policy's kinds: %v", name, err)
	}
	for _, u := range objs {
		if !isPolicy(u) && u.GetLabels()[afterPolicies] == "true" {
			create(u)
		}
	}
	// Settled: the reports of the namespace unchanged for 30 seconds, at
	// least 90 seconds after the last create (Kyverno's reports controller
	// aggregates on its own pace).
	var last string
	var since time.Time
	created := time.Now()
	var results map[key]*entry
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dyn.Resource(apiresources.PolicyReport).Namespace("ref").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		results = map[key]*entry{}
		for i := range list.Items {
			var r wgv1alpha2.PolicyReport
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &r); err != nil || r.Scope == nil {
				continue
			}
			for _, res := range r.Results {
				props := map[string]string{}
				for k, v := range res.Properties {
					props[k] = v
				}
				results[key{r.Scope.Kind, r.Scope.Namespace, r.Scope.Name, res.Policy, res.Rule}] = &entry{
					Result: string(res.Result), Message: res.Message, Source: res.Source, Severity: string(res.Severity),
					Category: res.Category, Scored: res.Scored, Properties: props}
			}
		}
		data, _ := json.Marshal(sortedKeys(results)) // the contents: never the pointers
		sum := fmt.Sprintf("%x", sha256.Sum256(data))
		if sum != last {
			last, since = sum, time.Now()
			return false, nil
		}
		return len(list.Items) > 0 && time.Since(since) > 30*time.Second && time.Since(created) > 90*time.Second, nil
	})
	if err != nil {
		t.Fatalf("%s: the reports did not settle (every resource reported, nothing changed for 30 s): %v", name, err)
	}
	t.Logf("%s: %d results of %d resources' reports (the scenario has %d resources)", name, len(results), reportsOf(results), resources(objs))
	return results
}

func reportsOf(m map[key]*entry) int {
	seen := map[string]bool{}
	for k := range m {
		seen[k.Kind+"/"+k.Name] = true
	}
	return len(seen)
}

func sortedKeys(m map[key]*entry) []string {
	var out []string
	for k, e := range m {
		out = append(out, fmt.Sprint(k, *e))
	}
	sort.Strings(out)
	return out
}

// resources counts the scenario's objects of the namespace a policy
// reports on (all but the policies, the namespace).
func resources(objs []*unstructured.Unstructured) int {
	n := 0
	for _, u := range objs {
		if u.GetNamespace() == "ref" && !strings.Contains(u.GetAPIVersion(), "kyverno.io") {
			n++
		}
	}
	return n
}

func ready(p *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}
