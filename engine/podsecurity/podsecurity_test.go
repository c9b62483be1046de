package podsecurity

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

// object decodes a resource written in YAML, as the engine receives it.
func object(t testing.TB, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("decode resource: %v", err)
	}
	return m
}

// pod wraps a pod spec (YAML, indented by four spaces) in a Pod.
func pod(spec string) string {
	return "kind: Pod\nmetadata:\n  name: p\nspec:\n" + spec
}

// hardenedSpec meets the restricted level.
const hardenedSpec = `    securityContext:
      runAsNonRoot: true
      seccompProfile: {type: RuntimeDefault}
    containers:
    - name: app
      image: nginx:1.27
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`

// hardenedWith returns a pod that meets the restricted level but for its app
// container's security context, given in YAML flow style.
func hardenedWith(containerSC string) string {
	return pod(strings.Replace(hardenedSpec, "{allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}", containerSC, 1))
}

func restricted(ex ...kyvernov1.PodSecurityStandard) kyvernov1.PodSecurity {
	return kyvernov1.PodSecurity{Level: "restricted", Version: "latest", Exclude: ex}
}

func baseline(ex ...kyvernov1.PodSecurityStandard) kyvernov1.PodSecurity {
	return kyvernov1.PodSecurity{Level: "baseline", Version: "latest", Exclude: ex}
}

func failedIDs(r Result) []string {
	var ids []string
	for _, c := range r.Checks {
		ids = append(ids, c.ID)
	}
	return ids
}

func TestLevelsAndVersions(t *testing.T) {
	tests := map[string]struct {
		rule     kyvernov1.PodSecurity
		resource string
		want     []string // failed checks; none: the rule passes
	}{
		"a hardened pod meets restricted": {rule: restricted(), resource: pod(hardenedSpec)},
		"a pod with no security context meets baseline": {
			rule: baseline(), resource: pod("    containers:\n    - {name: app, image: nginx}\n"),
		},
		"a pod with no security context fails four restricted checks": {
			rule:     restricted(),
			resource: pod("    containers:\n    - {name: app, image: nginx}\n"),
			want:     []string{"allowPrivilegeEscalation", "capabilities_restricted", "runAsNonRoot", "seccompProfile_restricted"},
		},
		"the privileged level passes a privileged pod": {
			rule:     kyvernov1.PodSecurity{Level: "privileged", Version: "latest"},
			resource: pod("    hostPID: true\n    containers:\n    - {name: app, image: nginx, securityContext: {privileged: true}}\n"),
		},
		"an empty version means latest": {
			rule:     kyvernov1.PodSecurity{Level: "baseline"},
			resource: pod("    hostIPC: true\n    containers:\n    - {name: app, image: nginx}\n"),
			want:     []string{"hostNamespaces"},
		},
		"a sysctl allowed since 1.29 fails a v1.28 rule": {
			rule:     kyvernov1.PodSecurity{Level: "baseline", Version: "v1.28"},
			resource: pod("    securityContext: {sysctls: [{name: net.ipv4.tcp_keepalive_time, value: '60'}]}\n    containers:\n    - {name: app, image: nginx}\n"),
			want:     []string{"sysctls"},
		},
		"a sysctl allowed since 1.29 passes a v1.29 rule": {
			rule:     kyvernov1.PodSecurity{Level: "baseline", Version: "v1.29"},
			resource: pod("    securityContext: {sysctls: [{name: net.ipv4.tcp_keepalive_time, value: '60'}]}\n    containers:\n    - {name: app, image: nginx}\n"),
		},
		"probe hosts are checked from 1.34 on": {
			rule:     baseline(),
			resource: pod("    containers:\n    - {name: app, image: nginx, livenessProbe: {httpGet: {host: 10.0.0.1, port: 80}}}\n"),
			want:     []string{"hostProbesAndHostLifecycle"},
		},
		"probe hosts are not checked before 1.34": {
			rule:     kyvernov1.PodSecurity{Level: "baseline", Version: "v1.33"},
			resource: pod("    containers:\n    - {name: app, image: nginx, livenessProbe: {httpGet: {host: 10.0.0.1, port: 80}}}\n"),
		},
		"seccomp annotations are checked before 1.19": {
			rule: kyvernov1.PodSecurity{Level: "baseline", Version: "v1.18"},
			resource: "kind: Pod\nmetadata:\n  name: p\n  annotations: {seccomp.security.alpha.kubernetes.io/pod: unconfined}\n" +
				"spec:\n  containers:\n  - {name: app, image: nginx}\n",
			want: []string{"seccompProfile_baseline"},
		},
		"a restricted rule reports the baseline and the restricted capabilities checks": {
			rule:     restricted(),
			resource: hardenedWith("{allowPrivilegeEscalation: false, capabilities: {drop: [ALL], add: [SYS_ADMIN]}}"),
			want:     []string{"capabilities_baseline", "capabilities_restricted"},
		},
		"a deployment's pod template is checked": {
			rule: baseline(),
			resource: "kind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      hostPID: true\n" +
				"      containers: [{name: app, image: nginx}]\n",
			want: []string{"hostNamespaces"},
		},
		"a cronjob's pod template is checked": {
			rule: restricted(),
			resource: "kind: CronJob\nmetadata: {name: c}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n" +
				"          securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n" +
				"          containers: [{name: app, image: nginx, securityContext: {capabilities: {drop: [ALL]}}}]\n",
			want: []string{"allowPrivilegeEscalation"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := object(t, tc.resource)
			got, err := Evaluate(tc.rule, obj["kind"].(string), obj)
			if err != nil {
				t.Fatal(err)
			}
			if got.Pass != (len(tc.want) == 0) || !slices.Equal(failedIDs(got), tc.want) {
				t.Fatalf("pass=%v failed=%v, want failed=%v\n%s", got.Pass, failedIDs(got), tc.want, got.Message)
			}
			if !got.Pass && !strings.HasPrefix(got.Message, `It violates PodSecurity "`+tc.rule.Level+":"+tc.rule.Version+`": (Forbidden reason: `) {
				t.Errorf("message %q does not read as Kyverno's", got.Message)
			}
		})
	}
}

func TestMessage(t *testing.T) {
	tests := map[string]struct {
		rule     kyvernov1.PodSecurity
		resource string
		want     string
	}{
		"a pod's fields are named from the pod": {
			rule:     baseline(),
			resource: pod("    hostIPC: true\n    containers:\n    - {name: app, image: nginx, securityContext: {privileged: true}}\n"),
			want: `It violates PodSecurity "baseline:latest": ` +
				`(Forbidden reason: host namespaces, field error list: [spec.hostIPC is forbidden, forbidden values found: true])` +
				`(Forbidden reason: privileged, field error list: [spec.containers[0].securityContext.privileged is forbidden, forbidden values found: true])`,
		},
		"a deployment's fields are named from the deployment": {
			rule: baseline(),
			resource: "kind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n" +
				"      containers: [{name: app, image: nginx, securityContext: {capabilities: {add: [SYS_ADMIN, NET_RAW, CHOWN]}}}]\n",
			want: `It violates PodSecurity "baseline:latest": (Forbidden reason: non-default capabilities, field error list: ` +
				`[spec.template.spec.containers[0].securityContext.capabilities.add is forbidden, forbidden values found: [SYS_ADMIN NET_RAW]])`,
		},
		"a cronjob's fields are named from the cronjob": {
			rule: kyvernov1.PodSecurity{Level: "restricted", Version: "v1.30"},
			resource: "kind: CronJob\nmetadata: {name: c}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n" +
				"          securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n" +
				"          initContainers: [{name: init, image: busybox, securityContext: {allowPrivilegeEscalation: false}}]\n" +
				"          containers: [{name: app, image: nginx, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]\n",
			want: `It violates PodSecurity "restricted:v1.30": (Forbidden reason: unrestricted capabilities, field error list: ` +
				`[spec.jobTemplate.spec.template.spec.initContainers[0].securityContext.capabilities.drop: Required value])`,
		},
		"unset and explicit values read as Kyverno prints them": {
			rule: restricted(),
			resource: pod("    securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n    containers:\n" +
				"    - {name: a, image: nginx, securityContext: {capabilities: {drop: [ALL]}}}\n" +
				"    - {name: b, image: nginx, securityContext: {allowPrivilegeEscalation: true, capabilities: {drop: [ALL]}}}\n" +
				"    - {name: c, image: nginx}\n"),
			want: `It violates PodSecurity "restricted:latest": (Forbidden reason: allowPrivilegeEscalation != false, field error list: [` +
				`spec.containers[0].securityContext.allowPrivilegeEscalation is forbidden, forbidden values found: nil, ` +
				`spec.containers[1].securityContext.allowPrivilegeEscalation is forbidden, forbidden values found: true, ` +
				`spec.containers[2].securityContext.allowPrivilegeEscalation: Required value])` +
				`(Forbidden reason: unrestricted capabilities, field error list: [spec.containers[2].securityContext.capabilities.drop: Required value])`,
		},
		"restricted volume types have no bad value": {
			rule:     restricted(),
			resource: pod(hardenedSpec + "    volumes: [{name: v, nfs: {server: s, path: /x}}]\n"),
			want: `It violates PodSecurity "restricted:latest": (Forbidden reason: restricted volume types, field error list: ` +
				`[spec.volumes[0].nfs: Forbidden])`,
		},
		"exempt fields are left out": {
			rule: baseline(kyvernov1.PodSecurityStandard{ControlName: "Privileged Containers", Images: []string{"nginx*"}}),
			resource: pod("    containers:\n    - {name: a, image: nginx, securityContext: {privileged: true}}\n" +
				"    - {name: b, image: busybox, securityContext: {privileged: true}}\n"),
			want: `It violates PodSecurity "baseline:latest": (Forbidden reason: privileged, field error list: ` +
				`[spec.containers[1].securityContext.privileged is forbidden, forbidden values found: true])`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := object(t, tc.resource)
			got, err := Evaluate(tc.rule, obj["kind"].(string), obj)
			if err != nil {
				t.Fatal(err)
			}
			if got.Message != tc.want {
				t.Errorf("message\n got %s\nwant %s", got.Message, tc.want)
			}
		})
	}
}

func TestCompileRejectsInvalidRules(t *testing.T) {
	tests := map[string]kyvernov1.PodSecurity{
		"an unknown level":                         {Level: "strict"},
		"a missing level":                          {Version: "latest"},
		"a version in words":                       {Level: "baseline", Version: "one"},
		"an unknown control":                       baseline(kyvernov1.PodSecurityStandard{ControlName: "Nope"}),
		"a container-level control without images": restricted(kyvernov1.PodSecurityStandard{ControlName: "Capabilities"}),
		"a pod-level control with images":          baseline(kyvernov1.PodSecurityStandard{ControlName: "Host Namespaces", Images: []string{"*"}}),
		"a restricted field without values": baseline(kyvernov1.PodSecurityStandard{
			ControlName: "Sysctls", RestrictedField: "spec.securityContext.sysctls[*].name"}),
		"values without a restricted field": baseline(kyvernov1.PodSecurityStandard{ControlName: "Sysctls", Values: []string{"x"}}),
		"a restricted control in a baseline rule": baseline(kyvernov1.PodSecurityStandard{
			ControlName: "Running as Non-root", Images: []string{"*"}}),
	}
	for name, rule := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Compile(rule); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestCompileAcceptsControlsAtBothLevels(t *testing.T) {
	for _, rule := range []kyvernov1.PodSecurity{
		baseline(kyvernov1.PodSecurityStandard{ControlName: "Seccomp"}, kyvernov1.PodSecurityStandard{ControlName: "Seccomp", Images: []string{"*"}}),
		baseline(kyvernov1.PodSecurityStandard{ControlName: "Capabilities", Images: []string{"*"}}),
		restricted(kyvernov1.PodSecurityStandard{ControlName: "Running as Non-root"}),
	} {
		if _, err := Compile(rule); err != nil {
			t.Errorf("%+v: %v", rule.Exclude, err)
		}
	}
}

func TestWithExclusions(t *testing.T) {
	c, err := Compile(baseline())
	if err != nil {
		t.Fatal(err)
	}
	obj := object(t, pod("    hostNetwork: true\n    containers:\n    - {name: app, image: nginx}\n"))
	if got, _ := c.Evaluate("Pod", obj); got.Pass {
		t.Fatal("host network passes without an exception")
	}
	withException, err := c.WithExclusions([]kyvernov1.PodSecurityStandard{{ControlName: "Host Namespaces"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := withException.Evaluate("Pod", obj); !got.Pass {
		t.Errorf("the exception's exclusion is not applied: %s", got.Message)
	}
	if got, _ := c.Evaluate("Pod", obj); got.Pass {
		t.Error("WithExclusions changed the rule it was called on")
	}
	if _, err := c.WithExclusions([]kyvernov1.PodSecurityStandard{{ControlName: "Nope"}}); !errors.Is(err, errInvalidExclusion) {
		t.Errorf("an unknown control in an exception: err = %v", err)
	}
}

func TestEvaluateErrors(t *testing.T) {
	tests := map[string]struct {
		rule     kyvernov1.PodSecurity
		kind     string
		resource string
	}{
		"a kind that has no pod":        {rule: baseline(), kind: "ConfigMap", resource: "kind: ConfigMap\ndata: {a: b}\n"},
		"a deployment without template": {rule: baseline(), kind: "Deployment", resource: "kind: Deployment\nspec: {replicas: 1}\n"},
		"a pod without spec":            {rule: restricted(), kind: "Pod", resource: "kind: Pod\nmetadata: {name: p}\n"},
		"the privileged level and a kind that has no pod": {
			rule: kyvernov1.PodSecurity{Level: "privileged"}, kind: "Service", resource: "kind: Service\n",
		},
		"a pod whose spec is not a pod spec": {
			rule: baseline(), kind: "Pod", resource: pod("    hostNetwork: yes-please\n    containers: [{name: a}]\n"),
		},
		"an annotation that is not a string": {
			rule: baseline(), kind: "Pod", resource: "kind: Pod\nmetadata: {annotations: {a: 1}}\nspec: {containers: [{name: a}]}\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Evaluate(tc.rule, tc.kind, object(t, tc.resource)); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// TestConcurrentEvaluations: one compiled rule serves many goroutines (run
// with -race).
func TestConcurrentEvaluations(t *testing.T) {
	c, err := Compile(baseline(ex("Capabilities", []string{"nginx*"}, "")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := PodOf("Pod", object(t, pod("    containers: [{name: a, image: busybox, securityContext: {capabilities: {add: [SYS_ADMIN, CHOWN]}}}]\n    securityContext: {sysctls: [{name: kernel.msgmax, value: '1'}]}\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := c.EvaluatePod(p).Message
	done := make(chan string)
	for range 8 {
		go func() {
			var last string
			for range 50 {
				last = c.EvaluatePod(p).Message
			}
			done <- last
		}()
	}
	for range 8 {
		if got := <-done; got != want {
			t.Errorf("concurrent message %q, want %q", got, want)
		}
	}
}
