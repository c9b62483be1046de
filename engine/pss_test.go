package engine_test

import (
	"testing"

	"github.com/tally-dev/tally/engine"
)

func psException(name, body string) string {
	return `
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: ` + name + `, namespace: shop}
spec:
  exceptions: [{policyName: p, ruleNames: [r]}]
  match: {any: [{resources: {kinds: [Pod]}}]}
` + body
}

// PolicyExceptions with podSecurity controls, as Kyverno documents them:
// a control exempted for the given images, and with restrictedField and
// values only for those values; several exceptions apply together.
func TestPodSecurityExceptionsApplyTogether(t *testing.T) {
	const baseline = `    validate:
      podSecurity: {level: baseline, version: latest}`
	const twoPrivilegedInits = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  initContainers:
  - {name: init1, image: "busybox:1.36", securityContext: {privileged: true}}
  - {name: init2, image: "alpine:3.20", securityContext: {privileged: true}}
  containers:
  - {name: app, image: "nginx:1.27"}
`
	addsCapability := func(c string) string {
		return `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers:
  - {name: app, image: "nginx:1.27", securityContext: {capabilities: {add: [` + c + `]}}}
`
	}
	init1 := psException("init1-exception-baseline", `  podSecurity:
  - {controlName: Privileged Containers, images: ["busybox*"]}
`)
	init2 := psException("init2-exception-baseline", `  podSecurity:
  - {controlName: Privileged Containers, images: ["alpine*"]}
`)
	netAdmin := psException("allow-net-admin", `  podSecurity:
  - controlName: Capabilities
    images: ["nginx*"]
    restrictedField: spec.containers[*].securityContext.capabilities.add
    values: [NET_ADMIN]
`)
	hostNetwork := psException("allow-host-network", `  podSecurity:
  - {controlName: Host Namespaces, restrictedField: spec.hostNetwork, values: ["true"]}
`)
	hostPod := func(fields string) string {
		return `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  ` + fields + `
  containers:
  - {name: app, image: "nginx:1.27"}
`
	}
	plain := psException("mynewpolex", "")
	tests := map[string]struct {
		pod        string
		exceptions []string
		want       engine.RuleResult // Result, Message (exact), Exceptions
	}{
		"two exceptions that each exempt one image skip together, naming both": {
			pod: twoPrivilegedInits, exceptions: []string{init1, init2},
			want: engine.RuleResult{Result: engine.Skip, Message: "rule is skipped due to policy exceptions shop/init1-exception-baseline, shop/init2-exception-baseline",
				Exceptions: []string{"init1-exception-baseline", "init2-exception-baseline"}},
		},
		"one of them leaves the other image failing": {
			pod: twoPrivilegedInits, exceptions: []string{init1},
			want: engine.RuleResult{Result: engine.Fail, Message: `Validation rule 'r' failed. It violates PodSecurity "baseline:latest": (Forbidden reason: privileged, field error list: [spec.initContainers[1].securityContext.privileged is forbidden, forbidden values found: true])`},
		},
		"restrictedField and values exempt the listed value": {
			pod: addsCapability("NET_ADMIN"), exceptions: []string{netAdmin},
			want: engine.RuleResult{Result: engine.Skip, Message: "rule is skipped due to policy exceptions shop/allow-net-admin", Exceptions: []string{"allow-net-admin"}},
		},
		"restrictedField and values leave other values failing": {
			pod: addsCapability("SYS_ADMIN"), exceptions: []string{netAdmin},
			want: engine.RuleResult{Result: engine.Fail, Message: `Validation rule 'r' failed. It violates PodSecurity "baseline:latest": (Forbidden reason: non-default capabilities, field error list: [spec.containers[0].securityContext.capabilities.add is forbidden, forbidden values found: [SYS_ADMIN]])`},
		},
		"a pod-level restrictedField exempts its value": {
			pod: hostPod("hostNetwork: true"), exceptions: []string{hostNetwork},
			want: engine.RuleResult{Result: engine.Skip, Message: "rule is skipped due to policy exceptions shop/allow-host-network", Exceptions: []string{"allow-host-network"}},
		},
		"a pod-level restrictedField leaves the control's other fields failing": {
			pod: hostPod("hostNetwork: true\n  hostPID: true"), exceptions: []string{hostNetwork},
			want: engine.RuleResult{Result: engine.Fail, Message: `Validation rule 'r' failed. It violates PodSecurity "baseline:latest": (Forbidden reason: host namespaces, field error list: [spec.hostPID is forbidden, forbidden values found: true])`},
		},
		"an exception without podSecurity controls exempts the whole rule, named alone": {
			pod: twoPrivilegedInits, exceptions: []string{plain},
			want: engine.RuleResult{Result: engine.Skip, Message: "rule is skipped due to policy exception shop/mynewpolex", Exceptions: []string{"mynewpolex"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := evaluateRule(t, baseline, tc.pod, tc.exceptions...)
			if len(got) != 1 {
				t.Fatalf("got %+v, want one result", got)
			}
			r := got[0]
			if r.Result != tc.want.Result || r.Message != tc.want.Message {
				t.Fatalf("got %s %q\nwant %s %q", r.Result, r.Message, tc.want.Result, tc.want.Message)
			}
			if len(r.Exceptions) != len(tc.want.Exceptions) {
				t.Fatalf("exceptions %v, want %v", r.Exceptions, tc.want.Exceptions)
			}
			for i := range r.Exceptions {
				if r.Exceptions[i] != tc.want.Exceptions[i] {
					t.Errorf("exceptions %v, want %v", r.Exceptions, tc.want.Exceptions)
				}
			}
		})
	}
}

// A failing podSecurity result carries the properties Kyverno's reports
// give it: the failing controls, as IDs and as JSON, and the standard and
// version of the rule.
func TestPodSecurityResultProperties(t *testing.T) {
	const pod = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  hostNetwork: true
  containers:
  - {name: app, image: "nginx:1.27", securityContext: {privileged: true, capabilities: {add: [NET_ADMIN]}}}
  - {name: side, image: "ghcr.io/x/side@sha256:abc", securityContext: {privileged: true}}
`
	tests := map[string]struct {
		rule, pod string
		want      map[string]string // nil: no podSecurity properties
	}{
		"a failure lists its controls": {
			rule: `    reportProperties: {team: a}
    validate:
      podSecurity: {level: baseline, version: v1.29}`,
			pod: pod,
			want: map[string]string{
				"team":     "a",
				"standard": "baseline",
				"version":  "v1.29",
				"controls": "capabilities_baseline,hostNamespaces,privileged",
				"controlsJSON": `[{"ID":"capabilities_baseline","Name":"Capabilities","Images":["docker.io/nginx:1.27"]},` +
					`{"ID":"hostNamespaces","Name":"Host Namespaces","Images":null},` +
					`{"ID":"privileged","Name":"Privileged Containers","Images":["docker.io/nginx:1.27","ghcr.io/x/side@sha256:abc"]}]`,
			},
		},
		"a pass has none": {
			rule: `    validate:
      podSecurity: {level: baseline, version: latest}`,
			pod: `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers:
  - {name: app, image: "nginx:1.27"}
`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := evaluateRule(t, tc.rule, tc.pod)
			if len(got) != 1 {
				t.Fatalf("got %+v, want one result", got)
			}
			props := got[0].Properties
			if tc.want == nil {
				if _, ok := props["controls"]; ok {
					t.Errorf("properties %v, want no controls", props)
				}
				return
			}
			for k, v := range tc.want {
				if props[k] != v {
					t.Errorf("%s = %s\nwant %s", k, props[k], v)
				}
			}
		})
	}
}
