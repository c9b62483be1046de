package podsecurity

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

// ex builds an exclusion: control, images, then restrictedField and values.
func ex(control string, images []string, field string, values ...string) kyvernov1.PodSecurityStandard {
	return kyvernov1.PodSecurityStandard{ControlName: control, Images: images, RestrictedField: field, Values: values}
}

var anyImage = []string{"*"}

// TestControls runs each control without and with exclusions: the bare rule
// must fail on the resource, and each exclusion case states whether it is
// enough.
func TestControls(t *testing.T) {
	type exclusionCase struct {
		exclude  []kyvernov1.PodSecurityStandard
		wantPass bool
	}
	tests := map[string]struct {
		rule     func(...kyvernov1.PodSecurityStandard) kyvernov1.PodSecurity
		resource string
		failed   []string // checks the bare rule fails
		cases    map[string]exclusionCase
	}{
		"Host Namespaces": {
			rule:     baseline,
			resource: pod("    hostNetwork: true\n    containers: [{name: app, image: nginx}]\n"),
			failed:   []string{"hostNamespaces"},
			cases: map[string]exclusionCase{
				"the control excluded":            {exclude: []kyvernov1.PodSecurityStandard{ex("Host Namespaces", nil, "")}, wantPass: true},
				"hostNetwork allowed to be true":  {exclude: []kyvernov1.PodSecurityStandard{ex("Host Namespaces", nil, "spec.hostNetwork", "true")}, wantPass: true},
				"another host namespace excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Host Namespaces", nil, "spec.hostPID", "true")}},
				"another control excluded":        {exclude: []kyvernov1.PodSecurityStandard{ex("Sysctls", nil, "")}},
			},
		},
		"Privileged Containers": {
			rule: baseline,
			resource: pod("    containers:\n    - {name: app, image: nginx:1.27, securityContext: {privileged: true}}\n" +
				"    initContainers:\n    - {name: init, image: busybox:1.36, securityContext: {privileged: true}}\n"),
			failed: []string{"privileged"},
			cases: map[string]exclusionCase{
				"both images excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Privileged Containers", []string{"nginx*", "busybox*"}, "")}, wantPass: true},
				"one image excluded":   {exclude: []kyvernov1.PodSecurityStandard{ex("Privileged Containers", []string{"nginx*"}, "")}},
				"the value allowed for every image": {
					exclude:  []kyvernov1.PodSecurityStandard{ex("Privileged Containers", anyImage, "spec.containers[*].securityContext.privileged", "true")},
					wantPass: false, // the init container's field is another restricted field
				},
				"the value allowed in containers and init containers": {
					exclude: []kyvernov1.PodSecurityStandard{
						ex("Privileged Containers", anyImage, "spec.containers[*].securityContext.privileged", "true"),
						ex("Privileged Containers", anyImage, "spec.initContainers[*].securityContext.privileged", "true"),
					},
					wantPass: true,
				},
				"another value allowed": {exclude: []kyvernov1.PodSecurityStandard{
					ex("Privileged Containers", anyImage, "spec.containers[*].securityContext.privileged", "false"),
					ex("Privileged Containers", anyImage, "spec.initContainers[*].securityContext.privileged", "false"),
				}},
			},
		},
		"Capabilities at baseline": {
			rule:     baseline,
			resource: pod("    containers:\n    - {name: app, image: nginx:latest, securityContext: {capabilities: {add: [FOO, CHOWN]}}}\n"),
			failed:   []string{"capabilities_baseline"},
			cases: map[string]exclusionCase{
				"the image excluded":     {exclude: []kyvernov1.PodSecurityStandard{ex("Capabilities", []string{"nginx*"}, "")}, wantPass: true},
				"another image excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Capabilities", []string{"redis*"}, "")}},
				"the added capability allowed": {
					exclude:  []kyvernov1.PodSecurityStandard{ex("Capabilities", []string{"nginx*"}, "spec.containers[*].securityContext.capabilities.add", "FOO", "BAR")},
					wantPass: true,
				},
				"other capabilities allowed": {exclude: []kyvernov1.PodSecurityStandard{
					ex("Capabilities", []string{"nginx*"}, "spec.containers[*].securityContext.capabilities.add", "BAZ")}},
			},
		},
		"Capabilities at restricted": {
			rule:     restricted,
			resource: hardenedWith("{allowPrivilegeEscalation: false, capabilities: {add: [SYS_ADMIN]}}"),
			failed:   []string{"capabilities_baseline", "capabilities_restricted"},
			cases: map[string]exclusionCase{
				"the image excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Capabilities", []string{"nginx:*"}, "")}, wantPass: true},
				"the added capability allowed, drop still missing": {exclude: []kyvernov1.PodSecurityStandard{
					ex("Capabilities", anyImage, "spec.containers[*].securityContext.capabilities.add", "SYS_ADMIN")}},
				"the added capability and the missing drop allowed": {
					exclude: []kyvernov1.PodSecurityStandard{
						ex("Capabilities", anyImage, "spec.containers[*].securityContext.capabilities.add", "SYS_ADMIN"),
						ex("Capabilities", anyImage, "spec.containers[*].securityContext.capabilities.drop", "*"),
					},
					wantPass: true,
				},
			},
		},
		"HostPath Volumes": {
			rule:     baseline,
			resource: pod("    containers: [{name: app, image: nginx}]\n    volumes: [{name: sock, hostPath: {path: /var/run/docker.sock}}]\n"),
			failed:   []string{"hostPathVolumes"},
			cases: map[string]exclusionCase{
				"the control excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("HostPath Volumes", nil, "")}, wantPass: true},
				"the path allowed": {
					exclude: []kyvernov1.PodSecurityStandard{ex("HostPath Volumes", nil, "spec.volumes[*].hostPath", "/var/run/*")}, wantPass: true,
				},
				"another path allowed": {exclude: []kyvernov1.PodSecurityStandard{ex("HostPath Volumes", nil, "spec.volumes[*].hostPath", "/data")}},
			},
		},
		"HostPath Volumes at restricted": {
			rule:     restricted,
			resource: pod(hardenedSpec + "    volumes: [{name: sock, hostPath: {path: /var/run/docker.sock}}]\n"),
			failed:   []string{"hostPathVolumes", "restrictedVolumes"},
			cases: map[string]exclusionCase{
				"only HostPath Volumes excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("HostPath Volumes", nil, "")}},
				"only Volume Types excluded":     {exclude: []kyvernov1.PodSecurityStandard{ex("Volume Types", nil, "")}},
				"both excluded": {
					exclude:  []kyvernov1.PodSecurityStandard{ex("HostPath Volumes", nil, ""), ex("Volume Types", nil, "spec.volumes[*].hostPath", "*")},
					wantPass: true,
				},
			},
		},
		"Host Ports": {
			rule:     baseline,
			resource: pod("    containers: [{name: app, image: nginx, ports: [{containerPort: 80}, {containerPort: 8080, hostPort: 8080}]}]\n"),
			failed:   []string{"hostPorts"},
			cases: map[string]exclusionCase{
				"the image excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Host Ports", []string{"nginx"}, "")}, wantPass: true},
				"the port allowed": {
					exclude: []kyvernov1.PodSecurityStandard{ex("Host Ports", anyImage, "spec.containers[*].ports[*].hostPort", "8080")}, wantPass: true,
				},
				"another port allowed": {exclude: []kyvernov1.PodSecurityStandard{ex("Host Ports", anyImage, "spec.containers[*].ports[*].hostPort", "80")}},
			},
		},
		"Host Probes / Lifecycle Hooks": {
			rule: baseline,
			resource: pod("    containers: [{name: app, image: nginx, readinessProbe: {tcpSocket: {host: 10.0.0.1, port: 80}}, " +
				"lifecycle: {preStop: {httpGet: {host: example.com, port: 80}}}}]\n"),
			failed: []string{"hostProbesAndHostLifecycle"},
			cases: map[string]exclusionCase{
				"the image excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Host Probes / Lifecycle Hooks", anyImage, "")}, wantPass: true},
				"the probe host allowed, the hook's not": {exclude: []kyvernov1.PodSecurityStandard{
					ex("Host Probes / Lifecycle Hooks", anyImage, "spec.containers[*].readinessProbe.tcpSocket.host", "10.*")}},
			},
		},
		"AppArmor": {
			rule: baseline,
			resource: "kind: Pod\nmetadata:\n  name: p\n  annotations: {container.apparmor.security.beta.kubernetes.io/app: unconfined}\n" +
				"spec:\n  containers: [{name: app, image: nginx, securityContext: {appArmorProfile: {type: Unconfined}}}]\n",
			failed: []string{"appArmorProfile"},
			cases: map[string]exclusionCase{
				"only the pod level excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("AppArmor", nil, "")}},
				"only the image excluded":     {exclude: []kyvernov1.PodSecurityStandard{ex("AppArmor", anyImage, "")}},
				"both levels excluded": {
					exclude: []kyvernov1.PodSecurityStandard{ex("AppArmor", nil, "metadata.annotations", "unconfined"), ex("AppArmor", anyImage, "")}, wantPass: true,
				},
			},
		},
		"SELinux": {
			rule: baseline,
			resource: pod("    securityContext: {seLinuxOptions: {type: spc_t}}\n" +
				"    containers: [{name: app, image: nginx, securityContext: {seLinuxOptions: {user: system_u}}}]\n"),
			failed: []string{"seLinuxOptions"},
			cases: map[string]exclusionCase{
				"only the pod level excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("SELinux", nil, "")}},
				"both levels excluded":        {exclude: []kyvernov1.PodSecurityStandard{ex("SELinux", nil, ""), ex("SELinux", anyImage, "")}, wantPass: true},
				"the type and the user allowed": {
					exclude: []kyvernov1.PodSecurityStandard{
						ex("SELinux", nil, "spec.securityContext.seLinuxOptions.type", "spc_t"),
						ex("SELinux", []string{"nginx"}, "spec.containers[*].securityContext.seLinuxOptions.user", "system_u"),
					},
					wantPass: true,
				},
			},
		},
		"/proc Mount Type": {
			rule:     restricted,
			resource: hardenedWith("{allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, procMount: Unmasked}"),
			failed:   []string{"procMount", "procMount_restricted"},
			cases: map[string]exclusionCase{
				"the image excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("/proc Mount Type", anyImage, "")}, wantPass: true},
				"the value allowed": {
					exclude:  []kyvernov1.PodSecurityStandard{ex("/proc Mount Type", anyImage, "spec.containers[*].securityContext.procMount", "Unmasked")},
					wantPass: true,
				},
			},
		},
		"Seccomp at baseline": {
			rule: baseline,
			resource: pod("    securityContext: {seccompProfile: {type: Unconfined}}\n" +
				"    containers: [{name: nginx, image: nginx:latest, securityContext: {seccompProfile: {type: Unconfined}}}]\n"),
			failed: []string{"seccompProfile_baseline"},
			cases: map[string]exclusionCase{
				"Unconfined allowed at both levels": {
					exclude: []kyvernov1.PodSecurityStandard{
						ex("Seccomp", nil, "spec.securityContext.seccompProfile.type", "Unconfined"),
						ex("Seccomp", []string{"nginx*"}, "spec.containers[*].securityContext.seccompProfile.type", "Unconfined"),
					},
					wantPass: true,
				},
				"Unconfined allowed at the pod level only": {exclude: []kyvernov1.PodSecurityStandard{
					ex("Seccomp", nil, "spec.securityContext.seccompProfile.type", "Unconfined")}},
			},
		},
		"Seccomp at restricted, unset in the container": {
			rule: restricted,
			resource: pod("    securityContext: {runAsNonRoot: true, seccompProfile: {type: Unconfined}}\n" +
				"    containers: [{name: app, image: busybox:1.28, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]\n"),
			failed: []string{"seccompProfile_baseline", "seccompProfile_restricted"},
			cases: map[string]exclusionCase{
				"both levels excluded":        {exclude: []kyvernov1.PodSecurityStandard{ex("Seccomp", nil, ""), ex("Seccomp", anyImage, "")}, wantPass: true},
				"only the pod level excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Seccomp", nil, "")}},
			},
		},
		"Sysctls": {
			rule:     baseline,
			resource: pod("    securityContext: {sysctls: [{name: kernel.msgmax, value: '1'}, {name: kernel.shm_rmid_forced, value: '1'}]}\n    containers: [{name: app, image: nginx}]\n"),
			failed:   []string{"sysctls"},
			cases: map[string]exclusionCase{
				"the control excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Sysctls", nil, "")}, wantPass: true},
				"the name allowed": {
					exclude: []kyvernov1.PodSecurityStandard{ex("Sysctls", nil, "spec.securityContext.sysctls[*].name", "kernel.msg*")}, wantPass: true,
				},
				"other names allowed": {exclude: []kyvernov1.PodSecurityStandard{ex("Sysctls", nil, "spec.securityContext.sysctls[*].name", "net.*")}},
			},
		},
		"HostProcess": {
			rule: baseline,
			resource: pod("    securityContext: {windowsOptions: {hostProcess: true}}\n" +
				"    containers: [{name: app, image: nginx, securityContext: {windowsOptions: {hostProcess: true}}}]\n"),
			failed: []string{"windowsHostProcess"},
			cases: map[string]exclusionCase{
				"only the pod level excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("HostProcess", nil, "")}},
				"both levels excluded":        {exclude: []kyvernov1.PodSecurityStandard{ex("HostProcess", nil, ""), ex("HostProcess", anyImage, "")}, wantPass: true},
			},
		},
		"Volume Types": {
			rule:     restricted,
			resource: pod(hardenedSpec + "    volumes: [{name: data, nfs: {server: nfs.local, path: /exports}}, {name: cfg, configMap: {name: c}}]\n"),
			failed:   []string{"restrictedVolumes"},
			cases: map[string]exclusionCase{
				"the control excluded":  {exclude: []kyvernov1.PodSecurityStandard{ex("Volume Types", nil, "")}, wantPass: true},
				"nfs volumes allowed":   {exclude: []kyvernov1.PodSecurityStandard{ex("Volume Types", nil, "spec.volumes[*].nfs", "*")}, wantPass: true},
				"iscsi volumes allowed": {exclude: []kyvernov1.PodSecurityStandard{ex("Volume Types", nil, "spec.volumes[*].iscsi", "*")}},
			},
		},
		"Privilege Escalation": {
			rule:     restricted,
			resource: hardenedWith("{allowPrivilegeEscalation: true, capabilities: {drop: [ALL]}}"),
			failed:   []string{"allowPrivilegeEscalation"},
			cases: map[string]exclusionCase{
				"the image excluded":     {exclude: []kyvernov1.PodSecurityStandard{ex("Privilege Escalation", []string{"nginx:1.*"}, "")}, wantPass: true},
				"another image excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Privilege Escalation", []string{"nginx:2.*"}, "")}},
			},
		},
		"Running as Non-root": {
			rule: restricted,
			resource: pod("    securityContext: {runAsNonRoot: false, seccompProfile: {type: RuntimeDefault}}\n" +
				"    containers: [{name: app, image: nginx, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]\n"),
			failed: []string{"runAsNonRoot"},
			cases: map[string]exclusionCase{
				"only the pod level excluded":       {exclude: []kyvernov1.PodSecurityStandard{ex("Running as Non-root", nil, "")}},
				"only the container level excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Running as Non-root", anyImage, "")}},
				"both levels excluded": {
					exclude:  []kyvernov1.PodSecurityStandard{ex("Running as Non-root", nil, ""), ex("Running as Non-root", anyImage, "")},
					wantPass: true,
				},
				"false allowed at both levels, the unset container field with it": {
					exclude: []kyvernov1.PodSecurityStandard{
						ex("Running as Non-root", nil, "spec.securityContext.runAsNonRoot", "false"),
						ex("Running as Non-root", anyImage, "spec.containers[*].securityContext.runAsNonRoot", "false"),
					},
					wantPass: true,
				},
			},
		},
		"Running as Non-root user": {
			rule:     restricted,
			resource: pod(hardenedSpec[:len("    securityContext:\n")] + "      runAsUser: 0\n" + hardenedSpec[len("    securityContext:\n"):]),
			failed:   []string{"runAsUser"},
			cases: map[string]exclusionCase{
				"the pod level excluded":   {exclude: []kyvernov1.PodSecurityStandard{ex("Running as Non-root user", nil, "")}, wantPass: true},
				"uid 0 allowed":            {exclude: []kyvernov1.PodSecurityStandard{ex("Running as Non-root user", nil, "spec.securityContext.runAsUser", "0")}, wantPass: true},
				"only containers excluded": {exclude: []kyvernov1.PodSecurityStandard{ex("Running as Non-root user", anyImage, "")}},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := object(t, tc.resource)
			bare, err := Evaluate(tc.rule(), "Pod", obj)
			if err != nil {
				t.Fatal(err)
			}
			if bare.Pass || !slices.Equal(failedIDs(bare), tc.failed) {
				t.Fatalf("without exclusions: failed %v, want %v\n%s", failedIDs(bare), tc.failed, bare.Message)
			}
			for name, c := range tc.cases {
				t.Run(name, func(t *testing.T) {
					got, err := Evaluate(tc.rule(c.exclude...), "Pod", obj)
					if err != nil {
						t.Fatal(err)
					}
					if got.Pass != c.wantPass {
						t.Errorf("pass = %v, want %v\n%s", got.Pass, c.wantPass, got.Message)
					}
				})
			}
		})
	}
}

// TestNeutralisedRecheckHasTheLastWord: when every listed field is exempt,
// the check runs again; a violation the field list missed keeps it failing.
func TestNeutralisedRecheckHasTheLastWord(t *testing.T) {
	c, err := Compile(baseline(ex("Privileged Containers", anyImage, "")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := PodOf("Pod", object(t, pod("    containers: [{name: app, image: nginx, securityContext: {privileged: true}}]\n")))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.EvaluatePod(p); !got.Pass {
		t.Fatalf("an excluded image fails: %s", got.Message)
	}
	for i := range c.checks {
		if c.checks[i].id == "privileged" {
			c.checks[i].fields = noFields // a field list that misses the violation
		}
	}
	got := c.EvaluatePod(p)
	if got.Pass {
		t.Fatal("the check passed although the neutralised pod still violates it")
	}
	if want := "(Forbidden reason: privileged, field error list: [container \"app\" must not set securityContext.privileged=true])"; !strings.HasSuffix(got.Message, want) {
		t.Errorf("message %q does not end with the check's detail %q", got.Message, want)
	}
}

// noFields lists the container's field but fixes nothing, as a field list
// that missed a violation would.
func noFields(_ *metav1.ObjectMeta, _ *corev1.PodSpec, _ *oracle) []violation {
	ref := containerRef{containers, 0}
	return []violation{{path: ref.path() + ".securityContext.privileged", errType: Forbidden, ref: ref,
		fix: func(*metav1.ObjectMeta, *corev1.PodSpec) {}}}
}
