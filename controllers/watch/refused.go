package watch

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Reasons the API server refuses a write for good: retrying the same write
// cannot succeed. They are bounded, for use as metric label values.
const (
	RefusedNamespaceGone = "namespace-gone"  // the namespace is gone or terminating
	RefusedInvalid       = "invalid"         // the object is invalid (or too large)
	RefusedForbidden     = "forbidden"       // RBAC or an admission plugin said no
	RefusedNotServed     = "kind-not-served" // the kind is not served (CRD not installed)
)

// Refused classifies an error the API server answered to a write: one of the
// Refused* reasons when retrying the same write cannot succeed, "" when it
// may (conflicts, timeouts, throttling, an unreachable server, ...).
func Refused(err error) string {
	switch {
	case err == nil:
		return ""
	case apierrors.IsNotFound(err): // of a create: its namespace is gone, or its kind is not served
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Details != nil && status.Status().Details.Kind == "namespaces" {
			return RefusedNamespaceGone
		}
		return RefusedNotServed
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return RefusedNamespaceGone
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err), apierrors.IsMethodNotSupported(err):
		return RefusedInvalid
	case apierrors.IsForbidden(err):
		return RefusedForbidden
	}
	return ""
}
