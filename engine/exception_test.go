package engine_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/engine"
)

// A PolicyException with podSecurity controls exempts those controls, not the
// whole rule: the rule is skipped only when nothing else fails.
func TestPodSecurityException(t *testing.T) {
	const rule = `    validate:
      podSecurity: {level: baseline, version: latest}`
	const privilegedPod = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers:
  - name: app
    image: "nginx:1.27"
    securityContext: {privileged: true}
`
	const privilegedHostNetworkPod = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  hostNetwork: true
  containers:
  - name: app
    image: "nginx:1.27"
    securityContext: {privileged: true}
`
	const exception = `
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: allow-privileged, namespace: shop}
spec:
  exceptions: [{policyName: p, ruleNames: [r]}]
  match: {any: [{resources: {kinds: [Pod], namespaces: [shop]}}]}
  podSecurity:
  - {controlName: Privileged Containers, images: ["nginx*"]}
`
	const wrongImages = `
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: allow-other, namespace: shop}
spec:
  exceptions: [{policyName: p, ruleNames: [r]}]
  match: {any: [{resources: {kinds: [Pod]}}]}
  podSecurity:
  - {controlName: Privileged Containers, images: ["busybox*"]}
`
	const badControl = `
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: bad, namespace: shop}
spec:
  exceptions: [{policyName: p, ruleNames: [r]}]
  match: {any: [{resources: {kinds: [Pod]}}]}
  podSecurity:
  - {controlName: No Such Control}
`
	tests := map[string]struct {
		pod, exception string
		want           wgv1alpha2.Result
		wantMsg        string
	}{
		"no exception: fails":                           {privilegedPod, "", engine.Fail, "Validation rule 'r' failed."},
		"exception clears the only failure: skip":       {privilegedPod, exception, engine.Skip, "rule is skipped due to policy exceptions shop/allow-privileged"},
		"another control still fails: fail":             {privilegedHostNetworkPod, exception, engine.Fail, "Validation rule 'r' failed."},
		"exception for other images leaves the failure": {privilegedPod, wrongImages, engine.Fail, "Validation rule 'r' failed."},
		"an exception naming an unknown control: error": {privilegedPod, badControl, engine.Error, "exception shop/bad: podSecurity:"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, policy("", rule))
			req := &engine.Request{Object: resource(t, tc.pod), Background: true}
			if tc.exception != "" {
				var pe kyvernov2.PolicyException
				if err := yaml.Unmarshal([]byte(tc.exception), &pe); err != nil {
					t.Fatal(err)
				}
				x, err := engine.CompileException(&pe)
				if err != nil {
					t.Fatal(err)
				}
				req.Exceptions = append(req.Exceptions, x)
			}
			for _, r := range p.Evaluate(context.Background(), req) {
				if r.Rule != "r" {
					continue
				}
				if r.Result != tc.want || !strings.HasPrefix(r.Message, tc.wantMsg) {
					t.Fatalf("got %s %q, want %s %q...", r.Result, r.Message, tc.want, tc.wantMsg)
				}
				return
			}
			t.Fatal("no result for rule r")
		})
	}
}

// Issue 53: a tenant's PolicyException (Reach: its own namespace) exempts
// resources of its namespace only, whatever its match names; the
// platform's (no Reach) exempts anything it matches.
func TestExceptionReach(t *testing.T) {
	var pe kyvernov2.PolicyException
	if err := yaml.Unmarshal([]byte(`
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: everyone, namespace: team-a}
spec:
  exceptions: [{policyName: require-team, ruleNames: [r]}]
  match: {any: [{resources: {kinds: [ConfigMap]}}]}
`), &pe); err != nil {
		t.Fatal(err)
	}
	policy := compile(t, `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-team}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate: {message: "label team is required", pattern: {metadata: {labels: {team: "?*"}}}}
`)
	scope := engine.ExceptionScope{Wide: []string{"platform"}}
	for name, tc := range map[string]struct {
		exceptionNamespace, resourceNamespace string
		scope                                 engine.ExceptionScope
		want                                  wgv1alpha2.Result
	}{
		"a tenant's exception, its own namespace's resource":     {"team-a", "team-a", scope, engine.Skip},
		"a tenant's exception, another namespace's resource":     {"team-a", "team-b", scope, engine.Fail},
		"the platform's exception, any namespace's resource":     {"platform", "team-b", scope, engine.Skip},
		"Kyverno's behaviour (*): any exception, any namespace":  {"team-a", "team-b", engine.ExceptionScope{Wide: []string{"*"}}, engine.Skip},
		"the exception namespace's exception reaches everywhere": {"platform", "team-b", engine.ExceptionScope{Namespace: "platform"}, engine.Skip},
	} {
		t.Run(name, func(t *testing.T) {
			pe := pe.DeepCopy()
			pe.Namespace = tc.exceptionNamespace
			x, err := engine.CompileException(pe)
			if err != nil {
				t.Fatal(err)
			}
			x.Reach = tc.scope.Reach(pe.Namespace)
			obj := resource(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: "+tc.resourceNamespace+"}\n")
			got := policy.Evaluate(context.Background(), &engine.Request{Object: obj, Background: true, Exceptions: []*engine.Exception{x}})
			if len(got) != 1 || got[0].Result != tc.want {
				t.Errorf("got %+v, want %s", got, tc.want)
			}
		})
	}
}
