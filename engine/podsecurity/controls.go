package podsecurity

import (
	"errors"
	"fmt"
	"sort"

	"k8s.io/pod-security-admission/policy"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

// scope says where a control's restricted fields live, which decides how an
// exclusion of it must be written: pod-level fields are exempted by an
// exclusion without images, container-level fields by one with images.
type scope uint8

const (
	scopeBoth      scope = iota // fields at the pod and the container level
	scopePod                    // only pod-level fields: images are not allowed
	scopeContainer              // only container-level fields: images are required
)

// control is one control of the Pod Security Standards, named as exclusions
// name it, with the pod-security-admission checks that enforce it.
type control struct {
	name   string
	checks []policy.CheckID
	scope  scope
	// restrictedOnly controls belong to the restricted level alone: a
	// baseline rule may not exclude them.
	restrictedOnly bool
}

// controls lists every control an exclusion may name. Capabilities and
// Seccomp have a check at each level; /proc Mount Type gained a restricted
// check in Kubernetes 1.35.
var controls = []control{
	{name: "HostProcess", checks: []policy.CheckID{"windowsHostProcess"}},
	{name: "Host Namespaces", checks: []policy.CheckID{"hostNamespaces"}, scope: scopePod},
	{name: "Privileged Containers", checks: []policy.CheckID{"privileged"}, scope: scopeContainer},
	{name: "Capabilities", checks: []policy.CheckID{"capabilities_baseline", "capabilities_restricted"}, scope: scopeContainer},
	{name: "HostPath Volumes", checks: []policy.CheckID{"hostPathVolumes"}, scope: scopePod},
	{name: "Host Ports", checks: []policy.CheckID{"hostPorts"}, scope: scopeContainer},
	{name: "Host Probes / Lifecycle Hooks", checks: []policy.CheckID{"hostProbesAndHostLifecycle"}, scope: scopeContainer},
	{name: "AppArmor", checks: []policy.CheckID{"appArmorProfile"}},
	{name: "SELinux", checks: []policy.CheckID{"seLinuxOptions"}},
	{name: "/proc Mount Type", checks: []policy.CheckID{"procMount", "procMount_restricted"}, scope: scopeContainer},
	{name: "Seccomp", checks: []policy.CheckID{"seccompProfile_baseline", "seccompProfile_restricted"}},
	{name: "Sysctls", checks: []policy.CheckID{"sysctls"}, scope: scopePod},
	{name: "Volume Types", checks: []policy.CheckID{"restrictedVolumes"}, scope: scopePod, restrictedOnly: true},
	{name: "Privilege Escalation", checks: []policy.CheckID{"allowPrivilegeEscalation"}, scope: scopeContainer, restrictedOnly: true},
	{name: "Running as Non-root", checks: []policy.CheckID{"runAsNonRoot"}, restrictedOnly: true},
	{name: "Running as Non-root user", checks: []policy.CheckID{"runAsUser"}, restrictedOnly: true},
}

var (
	controlByName  = map[string]*control{}
	controlOfCheck = map[policy.CheckID]*control{}
)

func init() {
	for i := range controls {
		c := &controls[i]
		controlByName[c.name] = c
		for _, id := range c.checks {
			controlOfCheck[id] = c
		}
	}
}

// Controls lists the control names exclusions accept, sorted.
func Controls() []string {
	out := make([]string, 0, len(controls))
	for i := range controls {
		out = append(out, controls[i].name)
	}
	sort.Strings(out)
	return out
}

// ControlOf returns the control that a pod-security-admission check ID
// enforces, or "" for a check tally does not know.
func ControlOf(checkID string) string {
	if c := controlOfCheck[policy.CheckID(checkID)]; c != nil {
		return c.name
	}
	return ""
}

// errInvalidExclusion classifies the errors of validateExclusion.
var errInvalidExclusion = errors.New("invalid podSecurity exclusion")

// validateExclusion applies the rules Kyverno's policy validation applies to
// an exclusion: a known control; images for a control with container-level
// fields only, none for one with pod-level fields only; restrictedField and
// values together. A rule (not a PolicyException) at the baseline level may
// not exclude a control of the restricted level alone.
func validateExclusion(ex kyvernov1.PodSecurityStandard, baselineRule bool) error {
	c := controlByName[ex.ControlName]
	switch {
	case c == nil:
		return fmt.Errorf("%w: unknown control %q (known: %v)", errInvalidExclusion, ex.ControlName, Controls())
	case c.scope == scopeContainer && len(ex.Images) == 0:
		return fmt.Errorf("%w: control %q has container-level fields only and needs images", errInvalidExclusion, ex.ControlName)
	case c.scope == scopePod && len(ex.Images) > 0:
		return fmt.Errorf("%w: control %q has pod-level fields only and takes no images", errInvalidExclusion, ex.ControlName)
	case ex.RestrictedField != "" && len(ex.Values) == 0:
		return fmt.Errorf("%w: control %q: restrictedField %q needs values", errInvalidExclusion, ex.ControlName, ex.RestrictedField)
	case ex.RestrictedField == "" && len(ex.Values) > 0:
		return fmt.Errorf("%w: control %q: values need a restrictedField", errInvalidExclusion, ex.ControlName)
	case baselineRule && c.restrictedOnly:
		return fmt.Errorf("%w: control %q belongs to the restricted level, not baseline", errInvalidExclusion, ex.ControlName)
	}
	return nil
}
