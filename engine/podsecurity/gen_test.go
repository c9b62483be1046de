package podsecurity

import (
	"math/rand/v2"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podGen draws pods that set every field the Pod Security Standards restrict,
// to allowed and forbidden values alike, with fields no check reads around
// them.
type podGen struct{ r *rand.Rand }

func newPodGen(seed uint64) podGen {
	return podGen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func pick[T any](g podGen, vs ...T) T { return vs[g.r.IntN(len(vs))] }

// maybe returns a pointer to one of vs, or nil.
func maybe[T any](g podGen, vs ...T) *T {
	if g.r.IntN(len(vs)+1) == 0 {
		return nil
	}
	return ptr(pick(g, vs...))
}

func (g podGen) pod() (*metav1.ObjectMeta, *corev1.PodSpec) {
	meta := &metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"team": "a"}}
	spec := &corev1.PodSpec{
		HostNetwork: g.r.IntN(6) == 0, HostPID: g.r.IntN(6) == 0, HostIPC: g.r.IntN(6) == 0,
		HostUsers: maybe(g, false, true), ServiceAccountName: "sa",
	}
	if g.r.IntN(6) == 0 {
		spec.OS = &corev1.PodOS{Name: pick(g, corev1.Windows, corev1.Linux)}
	}
	if g.r.IntN(4) > 0 {
		spec.SecurityContext = &corev1.PodSecurityContext{
			RunAsNonRoot: maybe(g, true, false), RunAsUser: maybe(g, int64(0), int64(1000)), FSGroup: maybe(g, int64(2000)),
			SeccompProfile: g.seccomp(), SELinuxOptions: g.seLinux(), WindowsOptions: g.windows(), AppArmorProfile: g.appArmor(),
		}
		for range g.r.IntN(3) {
			spec.SecurityContext.Sysctls = append(spec.SecurityContext.Sysctls, corev1.Sysctl{Value: "1", Name: pick(g,
				"kernel.shm_rmid_forced", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_rmem", "kernel.msgmax")})
		}
	}
	for range g.r.IntN(3) {
		spec.InitContainers = append(spec.InitContainers, g.container())
	}
	for range 1 + g.r.IntN(3) {
		spec.Containers = append(spec.Containers, g.container())
	}
	if g.r.IntN(4) == 0 {
		spec.EphemeralContainers = append(spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(g.container())})
	}
	for i := range g.r.IntN(4) {
		spec.Volumes = append(spec.Volumes, g.volume(i))
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if g.r.IntN(5) == 0 {
			meta.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name] = pick(g, "unconfined", "runtime/default", "localhost/p", "")
		}
		if g.r.IntN(5) == 0 {
			meta.Annotations[corev1.SeccompContainerAnnotationKeyPrefix+c.Name] = pick(g, "unconfined", "runtime/default", "docker/default")
		}
	}
	if g.r.IntN(5) == 0 {
		meta.Annotations[corev1.SeccompPodAnnotationKey] = pick(g, "unconfined", "runtime/default", "localhost/p")
	}
	return meta, spec
}

func (g podGen) container() corev1.Container {
	c := corev1.Container{
		Name:    "c" + strconv.Itoa(g.r.IntN(1000)),
		Image:   pick(g, "nginx:1.27", "busybox:1.36", "ghcr.io/x/y@sha256:00"),
		Command: []string{"run"}, Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
	}
	for range g.r.IntN(3) {
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: 80, HostPort: pick(g, int32(0), int32(8080))})
	}
	c.LivenessProbe, c.ReadinessProbe, c.StartupProbe = g.probe(), g.probe(), g.probe()
	if g.r.IntN(3) == 0 {
		c.Lifecycle = &corev1.Lifecycle{PostStart: g.handler(), PreStop: g.handler()}
	}
	if g.r.IntN(5) == 0 {
		return c
	}
	sc := &corev1.SecurityContext{
		Privileged: maybe(g, true, false), AllowPrivilegeEscalation: maybe(g, true, false),
		RunAsNonRoot: maybe(g, true, false), RunAsUser: maybe(g, int64(0), int64(1000)),
		ProcMount:      maybe(g, corev1.DefaultProcMount, corev1.UnmaskedProcMount),
		SeccompProfile: g.seccomp(), SELinuxOptions: g.seLinux(), WindowsOptions: g.windows(), AppArmorProfile: g.appArmor(),
		ReadOnlyRootFilesystem: maybe(g, true),
	}
	if g.r.IntN(4) > 0 {
		caps := &corev1.Capabilities{}
		for range g.r.IntN(3) {
			caps.Add = append(caps.Add, pick[corev1.Capability](g, "NET_BIND_SERVICE", "CHOWN", "SYS_ADMIN", "NET_RAW"))
		}
		for range g.r.IntN(3) {
			caps.Drop = append(caps.Drop, pick[corev1.Capability](g, "ALL", "NET_RAW"))
		}
		sc.Capabilities = caps
	}
	c.SecurityContext = sc
	return c
}

func (g podGen) seccomp() *corev1.SeccompProfile {
	t := maybe(g, corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeLocalhost, corev1.SeccompProfileTypeUnconfined)
	if t == nil {
		return nil
	}
	return &corev1.SeccompProfile{Type: *t}
}

func (g podGen) seLinux() *corev1.SELinuxOptions {
	if g.r.IntN(3) > 0 {
		return nil
	}
	return &corev1.SELinuxOptions{Type: pick(g, "", "container_t", "container_engine_t", "spc_t"), User: pick(g, "", "", "system_u"),
		Role: pick(g, "", "", "system_r"), Level: pick(g, "", "s0")}
}

func (g podGen) windows() *corev1.WindowsSecurityContextOptions {
	if g.r.IntN(4) > 0 {
		return nil
	}
	return &corev1.WindowsSecurityContextOptions{HostProcess: maybe(g, true, false)}
}

func (g podGen) appArmor() *corev1.AppArmorProfile {
	t := maybe(g, corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeUnconfined, corev1.AppArmorProfileTypeLocalhost)
	if t == nil {
		return nil
	}
	return &corev1.AppArmorProfile{Type: *t}
}

func (g podGen) probe() *corev1.Probe {
	if g.r.IntN(3) > 0 {
		return nil
	}
	h := g.handler()
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: h.HTTPGet, TCPSocket: h.TCPSocket, Exec: h.Exec}, PeriodSeconds: 10}
}

func (g podGen) handler() *corev1.LifecycleHandler {
	h := &corev1.LifecycleHandler{}
	switch g.r.IntN(3) {
	case 0:
		h.HTTPGet = &corev1.HTTPGetAction{Host: pick(g, "", "10.0.0.1"), Path: "/healthz"}
	case 1:
		h.TCPSocket = &corev1.TCPSocketAction{Host: pick(g, "", "example.com")}
	default:
		h.Exec = &corev1.ExecAction{Command: []string{"true"}}
	}
	return h
}

func (g podGen) volume(i int) corev1.Volume {
	v := corev1.Volume{Name: "v" + string(rune('0'+i))}
	switch g.r.IntN(8) {
	case 0:
		v.HostPath = &corev1.HostPathVolumeSource{Path: pick(g, "/var/run/docker.sock", "/data")}
	case 1:
		v.NFS = &corev1.NFSVolumeSource{Server: "s", Path: "/x"}
	case 2:
		v.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}
	case 3:
		v.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("1Gi"))}
	case 4:
		v.Secret = &corev1.SecretVolumeSource{SecretName: "s"}
	case 5:
		v.GitRepo = &corev1.GitRepoVolumeSource{Repository: "r"}
	case 6:
		v.Ephemeral = &corev1.EphemeralVolumeSource{}
	default: // no source: an unknown volume type
	}
	return v
}
