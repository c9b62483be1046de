package engine_test

import (
	"context"
	"strings"
	"testing"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
	"sigs.k8s.io/yaml"
)

// Differences from Kyverno 1.19 that Kyverno's CLI, judging resources
// varied at random (TestKyvernoCLIOracle), found; each is now as Kyverno.

// A pattern that fails where a conditional anchor key of it was met in no
// resource object is an error (Kyverno's "execution error"), not a fail:
// here the first container's securityContext lacks the anchor's key, and
// the second has no securityContext at all.
func TestAnchorKeyMissingFailureIsAnError(t *testing.T) {
	p := compile(t, policy("", `    validate:
      message: privileged containers must not run as foo
      pattern: {spec: {containers: [{securityContext: {(privileged): true}, name: "!foo*"}]}}
`))
	run := func(doc string) engine.RuleResult {
		t.Helper()
		rs := p.Evaluate(context.Background(), &engine.Request{Object: resource(t, doc)})
		if len(rs) != 1 {
			t.Fatalf("got %+v", rs)
		}
		return rs[0]
	}
	r := run(`{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: d}, spec: {containers: [{name: a, securityContext: {}}, {name: b}]}}`)
	want := "validation error: privileged containers must not run as foo. rule r execution error: pattern and resource have different structures. Path: /spec/containers/1/securityContext/. Expected map[string]interface {}, found <nil>"
	if r.Result != engine.Error || r.Message != want {
		t.Fatalf("got %s %q", r.Result, r.Message)
	}
	// Where the anchor key was found, the same failure is a fail.
	r = run(`{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: d}, spec: {containers: [{name: a, securityContext: {privileged: false}}, {name: b}]}}`)
	if r.Result != engine.Fail || !strings.Contains(r.Message, "failed at path /spec/containers/1/securityContext/") {
		t.Fatalf("got %s %q", r.Result, r.Message)
	}
}

// A rule that reads a foreach element outside of a foreach is refused.
func TestElementVariableOutsideForeachIsRefused(t *testing.T) {
	var cp kyvernov1.ClusterPolicy
	if err := yaml.Unmarshal([]byte(policy("", `    validate:
      message: "container {{ element.name }} uses latest"
      foreach:
      - list: request.object.spec.containers
        deny: {conditions: {any: [{key: "{{ element.image }}", operator: Equals, value: "*:latest"}]}}
`)), &cp); err != nil {
		t.Fatal(err)
	}
	p, err := engine.CompileClusterPolicy(&cp)
	if err != nil {
		t.Fatal(err)
	}
	err = engine.Malformed(p)
	if err == nil || !strings.Contains(err.Error(), "variable 'element.name' present outside of foreach at path /validate/message") {
		t.Fatalf("got %v", err)
	}
}
