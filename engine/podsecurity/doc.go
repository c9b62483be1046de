// Package podsecurity evaluates Kyverno's validate.podSecurity rules: a Pod,
// or the pod template of a Pod controller (Deployment, ReplicaSet,
// StatefulSet, DaemonSet, Job, ReplicationController, CronJob), against a Pod
// Security Standards level and version, with the checks of
// k8s.io/pod-security-admission, minus what the rule's exclude list (and a
// PolicyException's, through WithExclusions) exempts.
//
// # Levels and versions
//
// privileged always passes. baseline runs the baseline checks, restricted
// every check; each check at its newest revision not newer than the version
// ("latest", or "v1.X"). Unlike the admission plugin, and like Kyverno, a
// restricted check does not replace the baseline check it overrides: both
// run and both are reported (a pod adding SYS_ADMIN violates Capabilities
// twice), and excluding "Volume Types" leaves "HostPath Volumes" in force.
//
// # Exclusions
//
// An exclusion names a control (Controls lists them) and exempts its fields:
//   - without images, the pod-level fields (spec.hostNetwork,
//     spec.securityContext.*, spec.volumes[*], metadata.annotations[*]);
//   - with images (wildcards), the container-level fields
//     (spec.containers[*], initContainers, ephemeralContainers) of the
//     containers whose image matches one of them.
//
// A control with fields at both levels (Seccomp, SELinux, ...) needs both
// kinds of exclusion to be exempt entirely. restrictedField narrows the
// exclusion to one field, written with [*] for indices
// (spec.containers[*].securityContext.capabilities.add,
// spec.securityContext.sysctls[*].name, spec.volumes[*].hostPath); values
// then lists the values allowed (wildcards): every bad value of the field must
// match one. A field that is unset where it must be set has no value, and any
// exclusion of the field covers it, as in Kyverno. The bad value of a hostPath
// volume is its path; restricted volume types have none (restrictedField
// spec.volumes[*].nfs exempts nfs volumes).
//
// Compile rejects what Kyverno's policy validation rejects: an unknown
// control, images missing for a control with container-level fields only or
// given for one with pod-level fields only, restrictedField without values or
// values without restrictedField, and, in a baseline rule, a control of the
// restricted level alone.
//
// # How a check is judged
//
// Every check runs on the pod; most pass, and nothing else is done for them.
// For a failed check, the package lists the fields that violate it (path,
// bad value, container) and drops those an exclusion exempts. If none is
// left, the check runs again on a copy of the pod where those fields hold
// allowed values: it is exempt only if it then passes, so that the
// pod-security-admission check, not the field lists, has the last word.
//
// # Messages
//
// Failures read as Kyverno's (after its "Validation rule '<name>' failed. "):
//
//	It violates PodSecurity "restricted:latest": (Forbidden reason: host namespaces, field error list: [spec.hostIPC is forbidden, forbidden values found: true])(Forbidden reason: ...)
//
// with the field paths of the resource (spec.template.spec... for a
// Deployment) and the level and version as the rule spells them. Each
// failure also names the images of the containers its detail names
// (CheckFailure.Images), for the controlsJSON report property.
//
// # Differences from Kyverno
//
//   - Kyverno runs, for a pinned version, every older revision of a check too
//     (so a sysctl allowed since 1.27 fails a v1.29 rule); tally runs the
//     revision the version has, as the admission plugin does.
//   - Kyverno evaluates the privileged level like restricted; tally passes it.
//   - For a CronJob, Kyverno reads annotations from the job template's
//     metadata; tally from the pod template's, where the kubelet reads them.
//   - Kyverno judges an exclusion without images with a stand-in container,
//     which can exempt the first container's fields; tally keeps the
//     documented split between pod-level and container-level fields.
package podsecurity
