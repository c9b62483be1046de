// Package podsecurity evaluates Kyverno's validate.podSecurity rules with the
// checks of k8s.io/pod-security-admission: a Pod, or the pod template of a
// Pod controller, against a Pod Security Standards level and version, minus
// the controls the rule (or a PolicyException) excludes.
package podsecurity

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/wildcard"
)

// controlChecks maps the control names of the Pod Security Standards (as
// exclusions name them) to the pod-security-admission checks that enforce them.
var controlChecks = map[string][]policy.CheckID{
	"HostProcess":                   {"windowsHostProcess"},
	"Host Namespaces":               {"hostNamespaces"},
	"Privileged Containers":         {"privileged"},
	"Capabilities":                  {"capabilities_baseline", "capabilities_restricted"},
	"HostPath Volumes":              {"hostPathVolumes"},
	"Host Ports":                    {"hostPorts"},
	"AppArmor":                      {"appArmorProfile"},
	"SELinux":                       {"seLinuxOptions"},
	"/proc Mount Type":              {"procMount", "procMount_restricted"},
	"Seccomp":                       {"seccompProfile_baseline", "seccompProfile_restricted"},
	"Sysctls":                       {"sysctls"},
	"Volume Types":                  {"restrictedVolumes"},
	"Privilege Escalation":          {"allowPrivilegeEscalation"},
	"Running as Non-root":           {"runAsNonRoot"},
	"Running as Non-root user":      {"runAsUser"},
	"Host Probes / Lifecycle Hooks": {"hostProbesAndHostLifecycle"},
}

// containerLevel controls are checked per container; their exclusions name images.
var containerLevel = map[string]bool{
	"Capabilities": true, "Privileged Containers": true, "Host Ports": true, "SELinux": true,
	"/proc Mount Type": true, "Seccomp": true, "Privilege Escalation": true, "Running as Non-root": true,
	"Running as Non-root user": true, "AppArmor": true, "HostProcess": true, "Host Probes / Lifecycle Hooks": true,
}

var allChecks = policy.DefaultChecks()

// Result of a podSecurity evaluation.
type Result struct {
	Pass bool
	// Message lists the violated checks, as Kyverno reports them.
	Message string
	Checks  []CheckFailure
}

// CheckFailure is one violated check.
type CheckFailure struct {
	ID      string
	Reason  string
	Details string
}

// Compiled is a podSecurity rule prepared once.
type Compiled struct {
	rule   kyvernov1.PodSecurity
	level  psaapi.Level
	ver    psaapi.Version
	checks []compiledCheck
}

type compiledCheck struct {
	id      policy.CheckID
	fn      policy.CheckPodFn
	control string
}

// Compile validates a rule and selects the checks of its level and version.
func Compile(rule kyvernov1.PodSecurity) (*Compiled, error) {
	level, err := psaapi.ParseLevel(rule.Level)
	if err != nil {
		return nil, fmt.Errorf("level %q: %w", rule.Level, err)
	}
	v := rule.Version
	if v == "" {
		v = "latest"
	}
	ver, err := psaapi.ParseVersion(v)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", rule.Version, err)
	}
	for _, ex := range rule.Exclude {
		if _, ok := controlChecks[ex.ControlName]; !ok {
			return nil, fmt.Errorf("exclude: unknown control %q", ex.ControlName)
		}
	}
	c := &Compiled{rule: rule, level: level, ver: ver}
	if level == psaapi.LevelPrivileged {
		return c, nil
	}
	controlOf := map[policy.CheckID]string{}
	for name, ids := range controlChecks {
		for _, id := range ids {
			controlOf[id] = name
		}
	}
	overridden := map[policy.CheckID]bool{}
	var selected []compiledCheck
	for _, chk := range allChecks {
		if chk.Level == psaapi.LevelRestricted && level != psaapi.LevelRestricted {
			continue
		}
		vc := versionFor(chk, ver)
		if vc == nil {
			continue
		}
		for _, o := range vc.OverrideCheckIDs {
			overridden[o] = true
		}
		selected = append(selected, compiledCheck{id: chk.ID, fn: vc.CheckPod, control: controlOf[chk.ID]})
	}
	for _, s := range selected {
		if !overridden[s.id] {
			c.checks = append(c.checks, s)
		}
	}
	return c, nil
}

// versionFor picks the newest revision of a check that applies to a version.
func versionFor(chk policy.Check, ver psaapi.Version) *policy.VersionedCheck {
	var found *policy.VersionedCheck
	for i := range chk.Versions {
		vc := &chk.Versions[i]
		if ver.Latest() || !ver.Older(vc.MinimumVersion) {
			found = vc
		}
	}
	return found
}

// WithExclusions returns the rule with extra exclusions (from PolicyExceptions).
func (c *Compiled) WithExclusions(extra []kyvernov1.PodSecurityStandard) (*Compiled, error) {
	r := c.rule
	r.Exclude = append(append([]kyvernov1.PodSecurityStandard{}, r.Exclude...), extra...)
	return Compile(r)
}

// Pod is the pod part of a resource, read once and shared by every
// podSecurity rule evaluated against it.
type Pod struct {
	Meta *metav1.ObjectMeta
	Spec *corev1.PodSpec
}

// PodOf reads the pod of a Pod or a Pod controller given as JSON values.
func PodOf(kind string, obj map[string]any) (*Pod, error) {
	meta, spec, err := podOf(kind, obj)
	if err != nil {
		return nil, err
	}
	return &Pod{Meta: meta, Spec: spec}, nil
}

// Evaluate runs the rule on a Pod or a Pod controller given as JSON values.
func (c *Compiled) Evaluate(kind string, obj map[string]any) (Result, error) {
	if c.level == psaapi.LevelPrivileged {
		return Result{Pass: true}, nil
	}
	pod, err := PodOf(kind, obj)
	if err != nil {
		return Result{}, err
	}
	return c.EvaluatePod(pod), nil
}

// EvaluatePod runs the rule on a pod already read. It never modifies it.
func (c *Compiled) EvaluatePod(pod *Pod) Result {
	if c.level == psaapi.LevelPrivileged {
		return Result{Pass: true}
	}
	meta, spec := pod.Meta, pod.Spec
	var fails []CheckFailure
	for _, chk := range c.checks {
		r := chk.fn(meta, spec)
		if r.Allowed {
			continue
		}
		if excl := c.exclusionsFor(chk.control); len(excl) > 0 {
			reduced := excludeFrom(spec, chk.control, excl)
			if reduced == nil {
				continue // the whole control is exempt
			}
			if r = chk.fn(meta, reduced); r.Allowed {
				continue
			}
		}
		fails = append(fails, CheckFailure{ID: string(chk.id), Reason: r.ForbiddenReason, Details: r.ForbiddenDetail})
	}
	if len(fails) == 0 {
		return Result{Pass: true}
	}
	return Result{Checks: fails, Message: c.message(fails)}
}

// Evaluate is the one-shot form of Compile and Evaluate.
func Evaluate(rule kyvernov1.PodSecurity, kind string, obj map[string]any) (Result, error) {
	c, err := Compile(rule)
	if err != nil {
		return Result{}, err
	}
	return c.Evaluate(kind, obj)
}

func (c *Compiled) message(fails []CheckFailure) string {
	parts := make([]string, len(fails))
	for i, f := range fails {
		parts[i] = fmt.Sprintf("{Allowed:false ForbiddenReason:%s ForbiddenDetail:%s}", f.Reason, f.Details)
	}
	v := c.rule.Version
	if v == "" {
		v = "latest"
	}
	return fmt.Sprintf("It violates PodSecurity %q: (%s)", string(c.level)+":"+v, strings.Join(parts, ", "))
}

func (c *Compiled) exclusionsFor(control string) []kyvernov1.PodSecurityStandard {
	var out []kyvernov1.PodSecurityStandard
	for _, ex := range c.rule.Exclude {
		if ex.ControlName == control {
			out = append(out, ex)
		}
	}
	return out
}

// podOf extracts the pod metadata and spec of a Pod or a Pod controller.
func podOf(kind string, obj map[string]any) (*metav1.ObjectMeta, *corev1.PodSpec, error) {
	tmpl := obj
	switch kind {
	case "Pod":
	case "CronJob":
		tmpl = dig(obj, "spec", "jobTemplate", "spec", "template")
	default:
		tmpl = dig(obj, "spec", "template")
	}
	if tmpl == nil || tmpl["spec"] == nil {
		return nil, nil, fmt.Errorf("%s has no pod spec", kind)
	}
	var pod struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     corev1.PodSpec    `json:"spec"`
	}
	data, err := json.Marshal(map[string]any{"metadata": tmpl["metadata"], "spec": tmpl["spec"]})
	if err != nil {
		return nil, nil, fmt.Errorf("read pod spec: %w", err)
	}
	if err := json.Unmarshal(data, &pod); err != nil {
		return nil, nil, fmt.Errorf("read pod spec: %w", err)
	}
	return &pod.Metadata, &pod.Spec, nil
}

func dig(m map[string]any, path ...string) map[string]any {
	cur := m
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

// excludeFrom returns a copy of spec with what the exclusions allow taken
// out, or nil when an exclusion exempts the control entirely.
func excludeFrom(spec *corev1.PodSpec, control string, excl []kyvernov1.PodSecurityStandard) *corev1.PodSpec {
	out := spec.DeepCopy()
	for _, ex := range excl {
		if len(ex.Images) == 0 && ex.RestrictedField == "" {
			return nil
		}
		matches := func(image string) bool { return len(ex.Images) == 0 || wildcard.Any(ex.Images, image) }
		if ex.RestrictedField == "" {
			if !containerLevel[control] {
				return nil
			}
			// Exempt the containers whose image matches.
			out.Containers = keepContainers(out.Containers, matches)
			out.InitContainers = keepContainers(out.InitContainers, matches)
			out.EphemeralContainers = keepEphemeral(out.EphemeralContainers, matches)
			continue
		}
		allowField(out, ex.RestrictedField, ex.Values, matches)
	}
	return out
}

func keepContainers(cs []corev1.Container, exempt func(string) bool) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		if !exempt(c.Image) {
			out = append(out, c)
		}
	}
	return out
}

func keepEphemeral(cs []corev1.EphemeralContainer, exempt func(string) bool) []corev1.EphemeralContainer {
	var out []corev1.EphemeralContainer
	for _, c := range cs {
		if !exempt(c.Image) {
			out = append(out, c)
		}
	}
	return out
}

// allowField clears the values an exclusion allows from one restricted field,
// on the pod or on the containers whose image matches.
func allowField(spec *corev1.PodSpec, field string, values []string, matches func(string) bool) {
	allowed := func(v string) bool { return len(values) == 0 || wildcard.Any(values, v) }
	path := strings.TrimPrefix(field, "spec.")
	for _, list := range []string{"containers[*].", "initContainers[*].", "ephemeralContainers[*]."} {
		if rest, ok := strings.CutPrefix(path, list); ok {
			forEachContainer(spec, strings.TrimSuffix(list, "[*]."), matches, func(sc **corev1.SecurityContext, ports *[]corev1.ContainerPort) {
				allowContainerField(sc, ports, rest, allowed)
			})
			return
		}
	}
	allowPodField(spec, path, allowed)
}

func forEachContainer(spec *corev1.PodSpec, list string, matches func(string) bool, f func(**corev1.SecurityContext, *[]corev1.ContainerPort)) {
	switch list {
	case "containers":
		for i := range spec.Containers {
			if matches(spec.Containers[i].Image) {
				f(&spec.Containers[i].SecurityContext, &spec.Containers[i].Ports)
			}
		}
	case "initContainers":
		for i := range spec.InitContainers {
			if matches(spec.InitContainers[i].Image) {
				f(&spec.InitContainers[i].SecurityContext, &spec.InitContainers[i].Ports)
			}
		}
	case "ephemeralContainers":
		for i := range spec.EphemeralContainers {
			c := &spec.EphemeralContainers[i].EphemeralContainerCommon
			if matches(c.Image) {
				f(&c.SecurityContext, &c.Ports)
			}
		}
	}
}

func allowContainerField(scp **corev1.SecurityContext, ports *[]corev1.ContainerPort, field string, allowed func(string) bool) {
	sc := *scp
	switch field {
	case "securityContext.capabilities.add":
		if sc != nil && sc.Capabilities != nil {
			var keep []corev1.Capability
			for _, c := range sc.Capabilities.Add {
				if !allowed(string(c)) {
					keep = append(keep, c)
				}
			}
			sc.Capabilities.Add = keep
		}
	case "securityContext.capabilities.drop":
		if sc != nil && sc.Capabilities != nil && sc.Capabilities.Drop == nil {
			sc.Capabilities.Drop = []corev1.Capability{"ALL"}
		}
	case "ports[*].hostPort":
		var keep []corev1.ContainerPort
		for _, p := range *ports {
			if p.HostPort == 0 || !allowed(fmt.Sprint(p.HostPort)) {
				keep = append(keep, p)
			}
		}
		*ports = keep
	case "securityContext.seccompProfile.type":
		if sc != nil && sc.SeccompProfile != nil && allowed(string(sc.SeccompProfile.Type)) {
			sc.SeccompProfile = nil
		}
	case "securityContext.procMount":
		if sc != nil && sc.ProcMount != nil && allowed(string(*sc.ProcMount)) {
			sc.ProcMount = nil
		}
	case "securityContext.privileged":
		if sc != nil && sc.Privileged != nil && allowed(fmt.Sprint(*sc.Privileged)) {
			sc.Privileged = nil
		}
	case "securityContext.allowPrivilegeEscalation":
		if sc != nil && sc.AllowPrivilegeEscalation != nil && allowed(fmt.Sprint(*sc.AllowPrivilegeEscalation)) {
			f := false
			sc.AllowPrivilegeEscalation = &f
		}
	case "securityContext.runAsNonRoot":
		if sc != nil && allowed(fmt.Sprint(sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)) {
			t := true
			sc.RunAsNonRoot = &t
		}
	case "securityContext.runAsUser":
		if sc != nil && sc.RunAsUser != nil && allowed(fmt.Sprint(*sc.RunAsUser)) {
			sc.RunAsUser = nil
		}
	case "securityContext.seLinuxOptions.type", "securityContext.seLinuxOptions.user", "securityContext.seLinuxOptions.role":
		if sc != nil && sc.SELinuxOptions != nil {
			sc.SELinuxOptions = nil
		}
	}
}

func allowPodField(spec *corev1.PodSpec, field string, allowed func(string) bool) {
	sc := spec.SecurityContext
	switch field {
	case "securityContext.sysctls[*].name":
		if sc != nil {
			var keep []corev1.Sysctl
			for _, s := range sc.Sysctls {
				if !allowed(s.Name) {
					keep = append(keep, s)
				}
			}
			sc.Sysctls = keep
		}
	case "securityContext.seccompProfile.type":
		if sc != nil && sc.SeccompProfile != nil && allowed(string(sc.SeccompProfile.Type)) {
			sc.SeccompProfile = nil
		}
	case "hostNetwork":
		if allowed(fmt.Sprint(spec.HostNetwork)) {
			spec.HostNetwork = false
		}
	case "hostPID":
		if allowed(fmt.Sprint(spec.HostPID)) {
			spec.HostPID = false
		}
	case "hostIPC":
		if allowed(fmt.Sprint(spec.HostIPC)) {
			spec.HostIPC = false
		}
	case "volumes[*].hostPath":
		var keep []corev1.Volume
		for _, v := range spec.Volumes {
			if v.HostPath == nil || !allowed(v.HostPath.Path) {
				keep = append(keep, v)
			}
		}
		spec.Volumes = keep
	case "securityContext.runAsNonRoot":
		if sc != nil && allowed(fmt.Sprint(sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)) {
			t := true
			sc.RunAsNonRoot = &t
		}
	case "securityContext.seLinuxOptions.type", "securityContext.seLinuxOptions.user", "securityContext.seLinuxOptions.role":
		if sc != nil {
			sc.SELinuxOptions = nil
		}
	}
}

// Controls lists the control names exclusions accept.
func Controls() []string {
	out := make([]string, 0, len(controlChecks))
	for name := range controlChecks {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
