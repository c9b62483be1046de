package catalog

import (
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/api/apiresources"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
)

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var obj map[string]any
	if err := sigsyaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

const clusterPolicy = `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: team, resourceVersion: "RV"}
spec:
  rules:
  - name: team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: need a team, pattern: {metadata: {labels: {team: "?*"}}}}
`

func TestAVersionIsCompiledOnceForEveryReader(t *testing.T) {
	c := New()
	v1 := object(t, strings.Replace(clusterPolicy, "RV", "1", 1))
	var wg sync.WaitGroup
	got := make([]*Policy, 8)
	// The first reader compiles; the others, later, share its policy.
	first, err := c.Read(apiresources.ClusterPolicy, v1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = c.Read(apiresources.ClusterPolicy, v1.DeepCopy())
		}()
	}
	wg.Wait()
	for i, p := range got {
		if p != first {
			t.Errorf("reader %d got another compilation of the same version", i)
		}
	}
	if n := c.Compiles(); n != 1 {
		t.Errorf("%d compilations of one version, want 1", n)
	}
	if first.Key != "team" || first.Spec == nil || first.CEL != nil || first.Compiled == nil {
		t.Errorf("policy = %+v", first)
	}

	v2, err := c.Read(apiresources.ClusterPolicy, object(t, strings.Replace(clusterPolicy, "RV", "2", 1)))
	if err != nil || v2 == first {
		t.Errorf("a new version was not compiled anew (err %v)", err)
	}
	if n, l := c.Compiles(), c.Len(); n != 2 || l != 1 {
		t.Errorf("after a new version: %d compilations, %d remembered; want 2 and 1", n, l)
	}
	c.Forget(apiresources.ClusterPolicy, "", "team")
	if l := c.Len(); l != 0 {
		t.Errorf("%d remembered after Forget, want 0", l)
	}
}

func TestACompleteListDropsThePoliciesOfItsKindOnly(t *testing.T) {
	c := New()
	for _, name := range []string{"a", "b"} {
		if _, err := c.Read(apiresources.ClusterPolicy, object(t, strings.Replace(strings.Replace(clusterPolicy, "RV", "1", 1), "name: team", "name: "+name, 1))); err != nil {
			t.Fatal(err)
		}
	}
	vp := object(t, `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: a, resourceVersion: "1"}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  validations: [{expression: "true"}]
`)
	p, err := c.Read(apiresources.ValidatingPolicy, vp)
	if err != nil {
		t.Fatal(err)
	}
	if p.Key != policiesv1.KindValidatingPolicy+"/a" || p.CEL == nil || p.Spec != nil {
		t.Errorf("ValidatingPolicy read as %+v", p)
	}
	c.Retain(apiresources.ClusterPolicy, []*unstructured.Unstructured{object(t, `{metadata: {name: a}}`)})
	if l := c.Len(); l != 2 {
		t.Errorf("%d remembered, want 2 (ClusterPolicy a, ValidatingPolicy a)", l)
	}
}

func TestABrokenPolicyIsAnErrorNamingIt(t *testing.T) {
	bad := object(t, `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: bad, resourceVersion: "1"}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  validations: [{expression: "object.metadata.name +"}]
`)
	p, err := New().Read(apiresources.ValidatingPolicy, bad)
	if err == nil {
		t.Fatal("an expression that does not parse compiled")
	}
	if p == nil || p.Object == nil {
		t.Errorf("the policy object is not given with its error (Events name it): %+v", p)
	}
	if _, err := Read(apiresources.Namespace, bad); err == nil || !strings.Contains(err.Error(), "not a policy kind") {
		t.Errorf("a namespace read as a policy: %v", err)
	}
}
