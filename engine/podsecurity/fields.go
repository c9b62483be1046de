package podsecurity

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrorType says how a field violates a check, as Kyverno reports it.
type ErrorType string

const (
	// Forbidden: the field is set to a value the check forbids.
	Forbidden ErrorType = "Forbidden"
	// Required: the field must be set (to an allowed value) and is not.
	Required ErrorType = "Required"
)

// FieldError is one field of a resource that violates a check.
type FieldError struct {
	// Field is the path of the field in the resource, with indices:
	// spec.template.spec.containers[1].securityContext.privileged.
	Field string
	Type  ErrorType
	// BadValue is the offending value as reported ("true", "[NET_RAW
	// SYS_ADMIN]", "Unconfined"); empty when the field is unset.
	BadValue string
}

// String renders the error as Kyverno's podSecurity messages do.
func (e FieldError) String() string {
	var b strings.Builder
	e.writeTo(&b)
	return b.String()
}

func (e FieldError) writeTo(b *strings.Builder) {
	b.WriteString(e.Field)
	switch {
	case e.Type == Required:
		b.WriteString(": Required value")
	case e.BadValue != "":
		b.WriteString(" is forbidden, forbidden values found: ")
		b.WriteString(e.BadValue)
	default:
		b.WriteString(": Forbidden")
	}
}

// violation is a FieldError found in a pod, with what exclusions need to
// judge it and what neutralises it.
type violation struct {
	// path is the field's path in the pod (spec... or metadata...).
	path    string
	errType ErrorType
	// shown is the bad value as reported; bad are the values an
	// exclusion's values must all match (none for an unset field).
	shown string
	bad   []string
	// ref is the container the field belongs to; pod-level when unset.
	ref containerRef
	// fix sets the field to an allowed value in a copy of the pod.
	fix func(meta *metav1.ObjectMeta, spec *corev1.PodSpec)
}

func (v *violation) fieldError(p pathPrefix) FieldError {
	return FieldError{Field: p.rewrite(v.path), Type: v.errType, BadValue: v.shown}
}

// rewrite turns a pod path into the resource's path.
func (p pathPrefix) rewrite(path string) string {
	if p == podPaths || p == (pathPrefix{}) {
		return path
	}
	if rest, ok := strings.CutPrefix(path, "spec"); ok {
		return p.spec + rest
	}
	if rest, ok := strings.CutPrefix(path, "metadata"); ok {
		return p.meta + rest
	}
	return path
}

// containerList names one of the three lists of containers of a pod spec.
type containerList uint8

const (
	noContainer containerList = iota // a pod-level field
	initContainers
	containers
	ephemeralContainers
)

var listNames = [...]string{"", "initContainers", "containers", "ephemeralContainers"}

// containerRef identifies a container by list and index, so that it can be
// found again in a copy of the spec.
type containerRef struct {
	list  containerList
	index int
}

func (r containerRef) podLevel() bool { return r.list == noContainer }

func (r containerRef) path() string {
	return "spec." + listNames[r.list] + "[" + strconv.Itoa(r.index) + "]"
}

// in returns the container in spec; ephemeral containers share the
// Container layout, as the pod-security-admission checks assume.
func (r containerRef) in(spec *corev1.PodSpec) *corev1.Container {
	switch r.list {
	case initContainers:
		return &spec.InitContainers[r.index]
	case containers:
		return &spec.Containers[r.index]
	case ephemeralContainers:
		return (*corev1.Container)(&spec.EphemeralContainers[r.index].EphemeralContainerCommon)
	}
	return nil
}

// visitContainers calls f for every container in the order the checks
// visit them: init containers, containers, ephemeral containers.
func visitContainers(spec *corev1.PodSpec, f func(c *corev1.Container, ref containerRef)) {
	for i := range spec.InitContainers {
		f(&spec.InitContainers[i], containerRef{initContainers, i})
	}
	for i := range spec.Containers {
		f(&spec.Containers[i], containerRef{containers, i})
	}
	for i := range spec.EphemeralContainers {
		f((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon), containerRef{ephemeralContainers, i})
	}
}

// indexPattern returns path with its list indices replaced by "*", the form
// an exclusion's restrictedField takes: spec.containers[*].ports[*].hostPort.
func indexPattern(path string) string {
	if !strings.Contains(path, "[") {
		return path
	}
	var b strings.Builder
	b.Grow(len(path))
	for i := 0; i < len(path); i++ {
		b.WriteByte(path[i])
		if path[i] != '[' {
			continue
		}
		j := i + 1
		for j < len(path) && path[j] >= '0' && path[j] <= '9' {
			j++
		}
		if j > i+1 && j < len(path) && path[j] == ']' {
			b.WriteByte('*')
			i = j - 1
		}
	}
	return b.String()
}

// listValue renders a list of values as Kyverno prints them: [A B].
func listValue(vs []string) string {
	return "[" + strings.Join(vs, " ") + "]"
}

func ptr[T any](v T) *T { return &v }
