package podsecurity

import (
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// enumerator lists the fields of a pod that violate one check, in the order
// the check visits them (pod first, then init containers, containers,
// ephemeral containers). It is called only once the check has failed, and
// may ask the check itself whether one value is allowed (for value sets that
// change between versions: sysctls, SELinux types, capabilities, volumes).
type enumerator func(meta *metav1.ObjectMeta, spec *corev1.PodSpec, o *oracle) []violation

// oracle answers whether one value is allowed by asking the check about a
// pod that sets only that value, and remembers the answers: pods repeat the
// same few capabilities, sysctls, SELinux types and volume types.
type oracle struct {
	check    policy.CheckPodFn
	mu       sync.RWMutex
	verdicts map[string]bool
}

// maxVerdicts bounds the memory an oracle keeps, whatever values pods use.
const maxVerdicts = 1024

func newOracle(check policy.CheckPodFn) *oracle {
	return &oracle{check: check, verdicts: map[string]bool{}}
}

// allowed returns the check's verdict on the pod that probe builds for the
// value named key.
func (o *oracle) allowed(key string, probe func(*corev1.PodSpec)) bool {
	o.mu.RLock()
	ok, known := o.verdicts[key]
	o.mu.RUnlock()
	if known {
		return ok
	}
	var spec corev1.PodSpec
	probe(&spec)
	ok = o.check(&metav1.ObjectMeta{}, &spec).Allowed
	o.mu.Lock()
	if len(o.verdicts) < maxVerdicts {
		o.verdicts[key] = ok
	}
	o.mu.Unlock()
	return ok
}

// enumeratorFor returns the enumerator of a check at the version chosen for
// it (seccomp moved from annotations to fields in 1.19); nil for a check
// tally does not know, whose failures are reported without fields.
func enumeratorFor(id policy.CheckID, minimum psaapi.Version) enumerator {
	switch id {
	case "privileged":
		return privilegedFields
	case "allowPrivilegeEscalation":
		return privilegeEscalationFields
	case "capabilities_baseline":
		return baselineCapabilityFields
	case "capabilities_restricted":
		return restrictedCapabilityFields
	case "hostNamespaces":
		return hostNamespaceFields
	case "hostPathVolumes":
		return hostPathFields
	case "hostPorts":
		return hostPortFields
	case "hostProbesAndHostLifecycle":
		return hostProbeFields
	case "procMount", "procMount_restricted":
		return procMountFields
	case "runAsNonRoot":
		return runAsNonRootFields
	case "runAsUser":
		return runAsUserFields
	case "seccompProfile_baseline":
		if minimum.Older(psaapi.MajorMinorVersion(1, 19)) {
			return seccompAnnotationFields
		}
		return baselineSeccompFields
	case "seccompProfile_restricted":
		return restrictedSeccompFields
	case "seLinuxOptions":
		return seLinuxFields
	case "sysctls":
		return sysctlFields
	case "windowsHostProcess":
		return hostProcessFields
	case "appArmorProfile":
		return appArmorFields
	case "restrictedVolumes":
		return volumeTypeFields
	}
	return nil
}

var (
	trueValue  = []string{"true"}
	falseValue = []string{"false"}
	zeroValue  = []string{"0"}
)

func forbidden(path string, ref containerRef, shown string, bad []string, fix func(*metav1.ObjectMeta, *corev1.PodSpec)) violation {
	return violation{path: path, errType: Forbidden, shown: shown, bad: bad, ref: ref, fix: fix}
}

func required(path string, ref containerRef, fix func(*metav1.ObjectMeta, *corev1.PodSpec)) violation {
	return violation{path: path, errType: Required, ref: ref, fix: fix}
}

// securityContext returns the container's security context, creating it.
func securityContext(c *corev1.Container) *corev1.SecurityContext {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	return c.SecurityContext
}

func privilegedFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			vs = append(vs, forbidden(ref.path()+".securityContext.privileged", ref, "true", trueValue,
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { ref.in(s).SecurityContext.Privileged = ptr(false) }))
		}
	})
	return vs
}

func privilegeEscalationFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		path := ref.path() + ".securityContext.allowPrivilegeEscalation"
		fix := func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			securityContext(ref.in(s)).AllowPrivilegeEscalation = ptr(false)
		}
		switch sc := c.SecurityContext; {
		case sc == nil:
			vs = append(vs, required(path, ref, fix))
		case sc.AllowPrivilegeEscalation == nil:
			// Kyverno reports a security context without the field as
			// the value "nil"; it is unset all the same.
			vs = append(vs, forbidden(path, ref, "nil", nil, fix))
		case *sc.AllowPrivilegeEscalation:
			vs = append(vs, forbidden(path, ref, "true", trueValue, fix))
		}
	})
	return vs
}

// removeCapabilities returns a fix that removes caps from a container's
// capabilities.add.
func removeCapabilities(ref containerRef, caps []string) func(*metav1.ObjectMeta, *corev1.PodSpec) {
	return func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
		c := ref.in(s).SecurityContext.Capabilities
		c.Add = slices.DeleteFunc(c.Add, func(x corev1.Capability) bool { return slices.Contains(caps, string(x)) })
	}
}

func baselineCapabilityFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, o *oracle) (vs []violation) {
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
			return
		}
		var bad []string
		for _, cp := range c.SecurityContext.Capabilities.Add {
			if !o.allowed(string(cp), func(p *corev1.PodSpec) {
				p.Containers = []corev1.Container{{SecurityContext: &corev1.SecurityContext{
					Capabilities: &corev1.Capabilities{Add: []corev1.Capability{cp}}}}}
			}) {
				bad = append(bad, string(cp))
			}
		}
		if len(bad) > 0 {
			vs = append(vs, forbidden(ref.path()+".securityContext.capabilities.add", ref, listValue(bad), bad, removeCapabilities(ref, bad)))
		}
	})
	return vs
}

func restrictedCapabilityFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		drop := ref.path() + ".securityContext.capabilities.drop"
		dropAll := func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			sc := securityContext(ref.in(s))
			if sc.Capabilities == nil {
				sc.Capabilities = &corev1.Capabilities{}
			}
			sc.Capabilities.Drop = append(sc.Capabilities.Drop, "ALL")
		}
		if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
			vs = append(vs, required(drop, ref, dropAll))
			return
		}
		caps := c.SecurityContext.Capabilities
		switch {
		case slices.Contains(caps.Drop, "ALL"):
		case len(caps.Drop) == 0:
			vs = append(vs, required(drop, ref, dropAll))
		default:
			dropped := make([]string, len(caps.Drop))
			for i, d := range caps.Drop {
				dropped[i] = string(d)
			}
			vs = append(vs, forbidden(drop, ref, listValue(dropped), dropped, dropAll))
		}
		var bad []string
		for _, cp := range caps.Add {
			if cp != "NET_BIND_SERVICE" {
				bad = append(bad, string(cp))
			}
		}
		if len(bad) > 0 {
			vs = append(vs, forbidden(ref.path()+".securityContext.capabilities.add", ref, listValue(bad), bad, removeCapabilities(ref, bad)))
		}
	})
	return vs
}

func hostNamespaceFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	pod := containerRef{}
	if spec.HostNetwork {
		vs = append(vs, forbidden("spec.hostNetwork", pod, "true", trueValue, func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.HostNetwork = false }))
	}
	if spec.HostPID {
		vs = append(vs, forbidden("spec.hostPID", pod, "true", trueValue, func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.HostPID = false }))
	}
	if spec.HostIPC {
		vs = append(vs, forbidden("spec.hostIPC", pod, "true", trueValue, func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.HostIPC = false }))
	}
	return vs
}

// emptyDir returns a fix that replaces the source of volume i by an
// emptyDir, which every level allows.
func emptyDir(i int) func(*metav1.ObjectMeta, *corev1.PodSpec) {
	return func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
		s.Volumes[i].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	}
}

// hostPathFields reports the host path as the bad value, so that an
// exclusion's values can allow some paths.
func hostPathFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	for i, v := range spec.Volumes {
		if v.HostPath != nil {
			vs = append(vs, forbidden("spec.volumes["+strconv.Itoa(i)+"].hostPath", containerRef{}, v.HostPath.Path, []string{v.HostPath.Path}, emptyDir(i)))
		}
	}
	return vs
}

func hostPortFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		for i, p := range c.Ports {
			if p.HostPort != 0 {
				port := strconv.Itoa(int(p.HostPort))
				vs = append(vs, forbidden(ref.path()+".ports["+strconv.Itoa(i)+"].hostPort", ref, port, []string{port},
					func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { ref.in(s).Ports[i].HostPort = 0 }))
			}
		}
	})
	return vs
}

// handler is one probe or lifecycle hook of a container.
type handler struct {
	name string
	http *corev1.HTTPGetAction
	tcp  *corev1.TCPSocketAction
}

// handlers lists a container's probes and lifecycle hooks, always in the
// same order so that an index finds the same one in a copy.
func handlers(c *corev1.Container) [5]handler {
	var hs [5]handler
	for i, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		hs[i].name = [...]string{"livenessProbe", "readinessProbe", "startupProbe"}[i]
		if p != nil {
			hs[i].http, hs[i].tcp = p.HTTPGet, p.TCPSocket
		}
	}
	hs[3].name, hs[4].name = "lifecycle.postStart", "lifecycle.preStop"
	if c.Lifecycle != nil {
		if h := c.Lifecycle.PostStart; h != nil {
			hs[3].http, hs[3].tcp = h.HTTPGet, h.TCPSocket
		}
		if h := c.Lifecycle.PreStop; h != nil {
			hs[4].http, hs[4].tcp = h.HTTPGet, h.TCPSocket
		}
	}
	return hs
}

func hostProbeFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		for k, h := range handlers(c) {
			if h.http != nil && h.http.Host != "" {
				vs = append(vs, forbidden(ref.path()+"."+h.name+".httpGet.host", ref, h.http.Host, []string{h.http.Host},
					func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { handlers(ref.in(s))[k].http.Host = "" }))
			}
			if h.tcp != nil && h.tcp.Host != "" {
				vs = append(vs, forbidden(ref.path()+"."+h.name+".tcpSocket.host", ref, h.tcp.Host, []string{h.tcp.Host},
					func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { handlers(ref.in(s))[k].tcp.Host = "" }))
			}
		}
	})
	return vs
}

func procMountFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		if sc := c.SecurityContext; sc != nil && sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			t := string(*sc.ProcMount)
			vs = append(vs, forbidden(ref.path()+".securityContext.procMount", ref, t, []string{t},
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
					ref.in(s).SecurityContext.ProcMount = ptr(corev1.DefaultProcMount)
				}))
		}
	})
	return vs
}

func runAsNonRootFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	podNonRoot := false
	if sc := spec.SecurityContext; sc != nil && sc.RunAsNonRoot != nil {
		if *sc.RunAsNonRoot {
			podNonRoot = true
		} else {
			vs = append(vs, forbidden("spec.securityContext.runAsNonRoot", containerRef{}, "false", falseValue,
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.SecurityContext.RunAsNonRoot = ptr(true) }))
		}
	}
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		path := ref.path() + ".securityContext.runAsNonRoot"
		fix := func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { securityContext(ref.in(s)).RunAsNonRoot = ptr(true) }
		switch sc := c.SecurityContext; {
		case sc != nil && sc.RunAsNonRoot != nil:
			if !*sc.RunAsNonRoot {
				vs = append(vs, forbidden(path, ref, "false", falseValue, fix))
			}
		case !podNonRoot:
			vs = append(vs, required(path, ref, fix))
		}
	})
	return vs
}

func runAsUserFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	if sc := spec.SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		vs = append(vs, forbidden("spec.securityContext.runAsUser", containerRef{}, "0", zeroValue,
			func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.SecurityContext.RunAsUser = nil }))
	}
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			vs = append(vs, forbidden(ref.path()+".securityContext.runAsUser", ref, "0", zeroValue,
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { ref.in(s).SecurityContext.RunAsUser = nil }))
		}
	})
	return vs
}

func validSeccomp(t corev1.SeccompProfileType) bool {
	return t == corev1.SeccompProfileTypeRuntimeDefault || t == corev1.SeccompProfileTypeLocalhost
}

var runtimeDefault = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}

// seccompFields lists the seccomp profiles set to a forbidden type; with
// podDefault, it also lists the containers left without a profile when the
// pod sets no allowed one (the restricted level requires one).
func seccompFields(spec *corev1.PodSpec, podDefault bool) (vs []violation) {
	podSet := false
	if sc := spec.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		if t := sc.SeccompProfile.Type; validSeccomp(t) {
			podSet = true
		} else {
			vs = append(vs, forbidden("spec.securityContext.seccompProfile.type", containerRef{}, string(t), []string{string(t)},
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
					s.SecurityContext.SeccompProfile = runtimeDefault.DeepCopy()
				}))
		}
	}
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		path := ref.path() + ".securityContext.seccompProfile.type"
		fix := func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
			securityContext(ref.in(s)).SeccompProfile = runtimeDefault.DeepCopy()
		}
		switch sc := c.SecurityContext; {
		case sc != nil && sc.SeccompProfile != nil:
			if t := sc.SeccompProfile.Type; !validSeccomp(t) {
				vs = append(vs, forbidden(path, ref, string(t), []string{string(t)}, fix))
			}
		case podDefault && !podSet:
			vs = append(vs, required(path, ref, fix))
		}
	})
	return vs
}

func baselineSeccompFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) []violation {
	return seccompFields(spec, false)
}

func restrictedSeccompFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) []violation {
	return seccompFields(spec, true)
}

// setAnnotation returns a fix that sets an annotation to an allowed value.
func setAnnotation(key, value string) func(*metav1.ObjectMeta, *corev1.PodSpec) {
	return func(m *metav1.ObjectMeta, _ *corev1.PodSpec) { m.Annotations[key] = value }
}

// seccompAnnotationFields serves policy versions before 1.19, where seccomp
// profiles were set by annotations.
func seccompAnnotationFields(meta *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	valid := func(v string) bool {
		return v == corev1.SeccompProfileRuntimeDefault || v == corev1.DeprecatedSeccompProfileDockerDefault ||
			strings.HasPrefix(v, corev1.SeccompLocalhostProfileNamePrefix)
	}
	check := func(key string) {
		if v, ok := meta.Annotations[key]; ok && !valid(v) {
			vs = append(vs, forbidden("metadata.annotations["+key+"]", containerRef{}, v, []string{v},
				setAnnotation(key, corev1.SeccompProfileRuntimeDefault)))
		}
	}
	check(corev1.SeccompPodAnnotationKey)
	visitContainers(spec, func(c *corev1.Container, _ containerRef) {
		check(corev1.SeccompContainerAnnotationKeyPrefix + c.Name)
	})
	return vs
}

// seLinuxFields checks types against the check itself (the allowed types
// depend on the version) and forbids any user or role.
func seLinuxFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, o *oracle) (vs []violation) {
	typeAllowed := func(t string) bool {
		return o.allowed(t, func(p *corev1.PodSpec) {
			p.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: t}}
		})
	}
	add := func(opts *corev1.SELinuxOptions, base string, ref containerRef, options func(*corev1.PodSpec) *corev1.SELinuxOptions) {
		if opts == nil {
			return
		}
		if !typeAllowed(opts.Type) {
			vs = append(vs, forbidden(base+".type", ref, opts.Type, []string{opts.Type},
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { options(s).Type = "" }))
		}
		if opts.User != "" {
			vs = append(vs, forbidden(base+".user", ref, opts.User, []string{opts.User},
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { options(s).User = "" }))
		}
		if opts.Role != "" {
			vs = append(vs, forbidden(base+".role", ref, opts.Role, []string{opts.Role},
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { options(s).Role = "" }))
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		add(sc.SELinuxOptions, "spec.securityContext.seLinuxOptions", containerRef{},
			func(s *corev1.PodSpec) *corev1.SELinuxOptions { return s.SecurityContext.SELinuxOptions })
	}
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		if c.SecurityContext != nil {
			add(c.SecurityContext.SELinuxOptions, ref.path()+".securityContext.seLinuxOptions", ref,
				func(s *corev1.PodSpec) *corev1.SELinuxOptions { return ref.in(s).SecurityContext.SELinuxOptions })
		}
	})
	return vs
}

// allowedSysctl is allowed by every version of the Baseline policy; fixes
// rename a forbidden sysctl to it, which keeps the indices of the others.
const allowedSysctl = "kernel.shm_rmid_forced"

func sysctlFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, o *oracle) (vs []violation) {
	if spec.SecurityContext == nil {
		return nil
	}
	for i, s := range spec.SecurityContext.Sysctls {
		if !o.allowed(s.Name, func(p *corev1.PodSpec) {
			p.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: s.Name}}}
		}) {
			vs = append(vs, forbidden("spec.securityContext.sysctls["+strconv.Itoa(i)+"].name", containerRef{}, s.Name, []string{s.Name},
				func(_ *metav1.ObjectMeta, p *corev1.PodSpec) { p.SecurityContext.Sysctls[i].Name = allowedSysctl }))
		}
	}
	return vs
}

func hostProcessFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	set := func(w *corev1.WindowsSecurityContextOptions) bool {
		return w != nil && w.HostProcess != nil && *w.HostProcess
	}
	if sc := spec.SecurityContext; sc != nil && set(sc.WindowsOptions) {
		vs = append(vs, forbidden("spec.securityContext.windowsOptions.hostProcess", containerRef{}, "true", trueValue,
			func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
				s.SecurityContext.WindowsOptions.HostProcess = ptr(false)
			}))
	}
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		if sc := c.SecurityContext; sc != nil && set(sc.WindowsOptions) {
			vs = append(vs, forbidden(ref.path()+".securityContext.windowsOptions.hostProcess", ref, "true", trueValue,
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
					ref.in(s).SecurityContext.WindowsOptions.HostProcess = ptr(false)
				}))
		}
	})
	return vs
}

func appArmorFields(meta *metav1.ObjectMeta, spec *corev1.PodSpec, _ *oracle) (vs []violation) {
	allowed := func(p *corev1.AppArmorProfile) bool {
		return p == nil || p.Type == corev1.AppArmorProfileTypeRuntimeDefault || p.Type == corev1.AppArmorProfileTypeLocalhost
	}
	runtimeDefault := func() *corev1.AppArmorProfile {
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	}
	if sc := spec.SecurityContext; sc != nil && !allowed(sc.AppArmorProfile) {
		t := string(sc.AppArmorProfile.Type)
		vs = append(vs, forbidden("spec.securityContext.appArmorProfile.type", containerRef{}, t, []string{t},
			func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.SecurityContext.AppArmorProfile = runtimeDefault() }))
	}
	visitContainers(spec, func(c *corev1.Container, ref containerRef) {
		if sc := c.SecurityContext; sc != nil && !allowed(sc.AppArmorProfile) {
			t := string(sc.AppArmorProfile.Type)
			vs = append(vs, forbidden(ref.path()+".securityContext.appArmorProfile.type", ref, t, []string{t},
				func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
					ref.in(s).SecurityContext.AppArmorProfile = runtimeDefault()
				}))
		}
	})
	var keys []string
	for k, v := range meta.Annotations {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) &&
			v != "" && v != corev1.DeprecatedAppArmorBetaProfileRuntimeDefault &&
			!strings.HasPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := meta.Annotations[k]
		vs = append(vs, forbidden("metadata.annotations["+k+"]", containerRef{}, v, []string{v},
			setAnnotation(k, corev1.DeprecatedAppArmorBetaProfileRuntimeDefault)))
	}
	return vs
}

// volumeSourceNames are the JSON names of the fields of a volume source.
var volumeSourceNames = func() []string {
	t := reflect.TypeFor[corev1.VolumeSource]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}()

// volumeSources names the sources a volume sets ("unknown" when none is):
// one for a valid volume.
func volumeSources(v *corev1.Volume) []string {
	var names []string
	s := reflect.ValueOf(&v.VolumeSource).Elem()
	for i := range s.NumField() {
		if f := s.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			names = append(names, volumeSourceNames[i])
		}
	}
	if len(names) == 0 {
		return []string{"unknown"}
	}
	return names
}

// volumeTypeFields asks the check about each volume alone (the allowed
// types are the check's). Like Kyverno, it reports no bad value: an
// exclusion's restrictedField names the type (spec.volumes[*].nfs).
func volumeTypeFields(_ *metav1.ObjectMeta, spec *corev1.PodSpec, o *oracle) (vs []violation) {
	for i := range spec.Volumes {
		// The check reads which sources a volume sets: one, unless the
		// API server has not validated the volume.
		sources := volumeSources(&spec.Volumes[i])
		if !o.allowed(strings.Join(sources, "+"), func(p *corev1.PodSpec) { p.Volumes = spec.Volumes[i : i+1] }) {
			vs = append(vs, forbidden("spec.volumes["+strconv.Itoa(i)+"]."+sources[0], containerRef{}, "", nil, emptyDir(i)))
		}
	}
	return vs
}
