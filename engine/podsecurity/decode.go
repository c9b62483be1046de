package podsecurity

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// This file reads, from a pod spec given as JSON values, the fields the Pod
// Security Standards checks read: host namespaces and users, OS, security
// contexts, volume sources (and a hostPath's path), and for each container
// its name, image, host ports, security context, and the hosts of its probes
// and lifecycle hooks. Written for them, it is about ten times faster than the
// generic unstructured converter (see BenchmarkEvaluate/PodOf). Values of
// the wrong type are errors, as the converter makes them; null is an unset
// field; other fields are ignored. TestDecodeKeepsWhatChecksRead fills every
// field of typed pods at random and compares every check on them and on what
// this file reads back, so that a field a newer check reads is not missed
// silently.

// each calls f for each non-null field of an object, and locates its error.
func each(v any, f func(key string, v any) error) error {
	m, ok := v.(map[string]any)
	if !ok {
		return typeError(v, "an object")
	}
	for k, e := range m {
		if e == nil {
			continue
		}
		if err := f(k, e); err != nil {
			return under(k, err)
		}
	}
	return nil
}

// list returns a list's elements.
func list(v any) ([]any, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, typeError(v, "a list")
	}
	return l, nil
}

func indexed(i int, err error) error {
	return under("["+strconv.Itoa(i)+"]", err)
}

// decodeError is a decoding error with the path of its field:
// containers[0].securityContext.privileged: string is not a boolean.
type decodeError struct {
	path string
	err  error
}

func (e *decodeError) Error() string { return e.path + ": " + e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// under prefixes the path of err with a field name or an index.
func under(segment string, err error) error {
	fe, ok := err.(*decodeError)
	if !ok {
		return &decodeError{path: segment, err: err}
	}
	if strings.HasPrefix(fe.path, "[") {
		fe.path = segment + fe.path
	} else {
		fe.path = segment + "." + fe.path
	}
	return fe
}

func typeError(v any, want string) error {
	return fmt.Errorf("%T is not %s", v, want)
}

func toBool(v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, typeError(v, "a boolean")
	}
	return b, nil
}

func toBoolPtr(v any) (*bool, error) {
	b, err := toBool(v)
	return &b, err
}

func toString[T ~string](v any) (T, error) {
	s, ok := v.(string)
	if !ok {
		return "", typeError(v, "a string")
	}
	return T(s), nil
}

func toStringPtr[T ~string](v any) (*T, error) {
	s, err := toString[T](v)
	return &s, err
}

// toInt reads the integers JSON decoders produce: float64 (integral),
// int64, int, or json.Number.
func toInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<63 {
			return int64(n), nil
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return i, nil
		}
	}
	return 0, typeError(v, "an integer")
}

func toInt64Ptr(v any) (*int64, error) {
	n, err := toInt(v)
	return &n, err
}

func decodePodSpec(v any) (*corev1.PodSpec, error) {
	spec := &corev1.PodSpec{}
	return spec, each(v, func(k string, v any) (err error) {
		switch k {
		case "hostNetwork":
			spec.HostNetwork, err = toBool(v)
		case "hostPID":
			spec.HostPID, err = toBool(v)
		case "hostIPC":
			spec.HostIPC, err = toBool(v)
		case "hostUsers":
			spec.HostUsers, err = toBoolPtr(v)
		case "os":
			spec.OS = &corev1.PodOS{}
			err = each(v, func(k string, v any) (err error) {
				if k == "name" {
					spec.OS.Name, err = toString[corev1.OSName](v)
				}
				return err
			})
		case "securityContext":
			spec.SecurityContext, err = decodePodSecurityContext(v)
		case "initContainers":
			spec.InitContainers, err = decodeContainers(v)
		case "containers":
			spec.Containers, err = decodeContainers(v)
		case "ephemeralContainers":
			var cs []corev1.Container
			cs, err = decodeContainers(v)
			spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(cs))
			for i := range cs {
				spec.EphemeralContainers[i].EphemeralContainerCommon = corev1.EphemeralContainerCommon(cs[i])
			}
		case "volumes":
			spec.Volumes, err = decodeVolumes(v)
		}
		return err
	})
}

func decodePodSecurityContext(v any) (*corev1.PodSecurityContext, error) {
	sc := &corev1.PodSecurityContext{}
	return sc, each(v, func(k string, v any) (err error) {
		switch k {
		case "runAsNonRoot":
			sc.RunAsNonRoot, err = toBoolPtr(v)
		case "runAsUser":
			sc.RunAsUser, err = toInt64Ptr(v)
		case "seccompProfile":
			sc.SeccompProfile, err = decodeSeccomp(v)
		case "seLinuxOptions":
			sc.SELinuxOptions, err = decodeSELinux(v)
		case "windowsOptions":
			sc.WindowsOptions, err = decodeWindows(v)
		case "appArmorProfile":
			sc.AppArmorProfile, err = decodeAppArmor(v)
		case "sysctls":
			sc.Sysctls, err = decodeSysctls(v)
		}
		return err
	})
}

func decodeSysctls(v any) ([]corev1.Sysctl, error) {
	l, err := list(v)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.Sysctl, len(l))
	for i, e := range l {
		err := each(e, func(k string, v any) (err error) {
			switch k {
			case "name":
				out[i].Name, err = toString[string](v)
			case "value":
				out[i].Value, err = toString[string](v)
			}
			return err
		})
		if err != nil {
			return out, indexed(i, err)
		}
	}
	return out, nil
}

func decodeSecurityContext(v any) (*corev1.SecurityContext, error) {
	sc := &corev1.SecurityContext{}
	return sc, each(v, func(k string, v any) (err error) {
		switch k {
		case "privileged":
			sc.Privileged, err = toBoolPtr(v)
		case "allowPrivilegeEscalation":
			sc.AllowPrivilegeEscalation, err = toBoolPtr(v)
		case "runAsNonRoot":
			sc.RunAsNonRoot, err = toBoolPtr(v)
		case "runAsUser":
			sc.RunAsUser, err = toInt64Ptr(v)
		case "procMount":
			sc.ProcMount, err = toStringPtr[corev1.ProcMountType](v)
		case "capabilities":
			sc.Capabilities = &corev1.Capabilities{}
			err = each(v, func(k string, v any) (err error) {
				switch k {
				case "add":
					sc.Capabilities.Add, err = decodeCapabilities(v)
				case "drop":
					sc.Capabilities.Drop, err = decodeCapabilities(v)
				}
				return err
			})
		case "seccompProfile":
			sc.SeccompProfile, err = decodeSeccomp(v)
		case "seLinuxOptions":
			sc.SELinuxOptions, err = decodeSELinux(v)
		case "windowsOptions":
			sc.WindowsOptions, err = decodeWindows(v)
		case "appArmorProfile":
			sc.AppArmorProfile, err = decodeAppArmor(v)
		}
		return err
	})
}

func decodeCapabilities(v any) ([]corev1.Capability, error) {
	l, err := list(v)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.Capability, len(l))
	for i, e := range l {
		if out[i], err = toString[corev1.Capability](e); err != nil {
			return out, indexed(i, err)
		}
	}
	return out, nil
}

func decodeSeccomp(v any) (*corev1.SeccompProfile, error) {
	p := &corev1.SeccompProfile{}
	return p, each(v, func(k string, v any) (err error) {
		switch k {
		case "type":
			p.Type, err = toString[corev1.SeccompProfileType](v)
		case "localhostProfile":
			p.LocalhostProfile, err = toStringPtr[string](v)
		}
		return err
	})
}

func decodeAppArmor(v any) (*corev1.AppArmorProfile, error) {
	p := &corev1.AppArmorProfile{}
	return p, each(v, func(k string, v any) (err error) {
		switch k {
		case "type":
			p.Type, err = toString[corev1.AppArmorProfileType](v)
		case "localhostProfile":
			p.LocalhostProfile, err = toStringPtr[string](v)
		}
		return err
	})
}

func decodeSELinux(v any) (*corev1.SELinuxOptions, error) {
	o := &corev1.SELinuxOptions{}
	return o, each(v, func(k string, v any) (err error) {
		switch k {
		case "user":
			o.User, err = toString[string](v)
		case "role":
			o.Role, err = toString[string](v)
		case "type":
			o.Type, err = toString[string](v)
		case "level":
			o.Level, err = toString[string](v)
		}
		return err
	})
}

func decodeWindows(v any) (*corev1.WindowsSecurityContextOptions, error) {
	o := &corev1.WindowsSecurityContextOptions{}
	return o, each(v, func(k string, v any) (err error) {
		if k == "hostProcess" {
			o.HostProcess, err = toBoolPtr(v)
		}
		return err
	})
}

func decodeContainers(v any) ([]corev1.Container, error) {
	l, err := list(v)
	if err != nil {
		return nil, err
	}
	cs := make([]corev1.Container, len(l))
	for i, e := range l {
		if err := decodeContainer(e, &cs[i]); err != nil {
			return cs, indexed(i, err)
		}
	}
	return cs, nil
}

func decodeContainer(v any, c *corev1.Container) error {
	return each(v, func(k string, v any) (err error) {
		switch k {
		case "name":
			c.Name, err = toString[string](v)
		case "image":
			c.Image, err = toString[string](v)
		case "ports":
			c.Ports, err = decodePorts(v)
		case "securityContext":
			c.SecurityContext, err = decodeSecurityContext(v)
		case "livenessProbe":
			c.LivenessProbe, err = decodeProbe(v)
		case "readinessProbe":
			c.ReadinessProbe, err = decodeProbe(v)
		case "startupProbe":
			c.StartupProbe, err = decodeProbe(v)
		case "lifecycle":
			c.Lifecycle = &corev1.Lifecycle{}
			err = each(v, func(k string, v any) (err error) {
				switch k {
				case "postStart":
					c.Lifecycle.PostStart, err = decodeHook(v)
				case "preStop":
					c.Lifecycle.PreStop, err = decodeHook(v)
				}
				return err
			})
		}
		return err
	})
}

// decodePorts keeps each port's hostPort.
func decodePorts(v any) ([]corev1.ContainerPort, error) {
	l, err := list(v)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.ContainerPort, len(l))
	for i, e := range l {
		err := each(e, func(k string, v any) error {
			if k != "hostPort" {
				return nil
			}
			n, err := toInt(v)
			if err == nil && (n < math.MinInt32 || n > math.MaxInt32) {
				err = fmt.Errorf("%d is out of range", n)
			}
			out[i].HostPort = int32(n)
			return err
		})
		if err != nil {
			return out, indexed(i, err)
		}
	}
	return out, nil
}

// decodeHosts reads the hosts of a probe's or hook's httpGet and tcpSocket.
func decodeHosts(v any) (http *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction, err error) {
	host := func(v any) (host string, err error) {
		err = each(v, func(k string, v any) (err error) {
			if k == "host" {
				host, err = toString[string](v)
			}
			return err
		})
		return host, err
	}
	err = each(v, func(k string, v any) (err error) {
		switch k {
		case "httpGet":
			http = &corev1.HTTPGetAction{}
			http.Host, err = host(v)
		case "tcpSocket":
			tcp = &corev1.TCPSocketAction{}
			tcp.Host, err = host(v)
		}
		return err
	})
	return http, tcp, err
}

func decodeProbe(v any) (*corev1.Probe, error) {
	p := &corev1.Probe{}
	var err error
	p.HTTPGet, p.TCPSocket, err = decodeHosts(v)
	return p, err
}

func decodeHook(v any) (*corev1.LifecycleHandler, error) {
	h := &corev1.LifecycleHandler{}
	var err error
	h.HTTPGet, h.TCPSocket, err = decodeHosts(v)
	return h, err
}

// volumeSourceFields maps the JSON name of each volume source to its field.
var volumeSourceFields = func() map[string]int {
	m := make(map[string]int, len(volumeSourceNames))
	for i, name := range volumeSourceNames {
		m[name] = i
	}
	return m
}()

// decodeVolumes reads each volume's name and the sources it sets, empty
// (the checks read their presence) but for a hostPath's path.
func decodeVolumes(v any) ([]corev1.Volume, error) {
	l, err := list(v)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.Volume, len(l))
	for i, e := range l {
		vol := &out[i]
		err := each(e, func(k string, v any) (err error) {
			switch k {
			case "name":
				vol.Name, err = toString[string](v)
				return err
			case "hostPath":
				vol.HostPath = &corev1.HostPathVolumeSource{}
				return each(v, func(k string, v any) (err error) {
					if k == "path" {
						vol.HostPath.Path, err = toString[string](v)
					}
					return err
				})
			}
			f, ok := volumeSourceFields[k]
			if !ok {
				return nil
			}
			if _, ok := v.(map[string]any); !ok {
				return typeError(v, "an object")
			}
			field := reflect.ValueOf(&vol.VolumeSource).Elem().Field(f)
			field.Set(reflect.New(field.Type().Elem()))
			return nil
		})
		if err != nil {
			return out, indexed(i, err)
		}
	}
	return out, nil
}
