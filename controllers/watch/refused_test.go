package watch

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestRefused(t *testing.T) {
	reports := schema.GroupResource{Group: "kyverno.io", Resource: "backgroundscanreports"}
	terminating := apierrors.NewForbidden(reports, "uid-1", errors.New("namespace ns is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace ns is being terminated", Field: "metadata.namespace"}}
	tests := map[string]struct {
		err  error
		want string
	}{
		"the namespace is gone":        {apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"), RefusedNamespaceGone},
		"the namespace is terminating": {terminating, RefusedNamespaceGone},
		"the kind is not served":       {apierrors.NewNotFound(reports, ""), RefusedNotServed},
		"the report is invalid": {apierrors.NewInvalid(schema.GroupKind{Group: "kyverno.io", Kind: "BackgroundScanReport"}, "uid-1",
			field.ErrorList{field.Invalid(field.NewPath("metadata", "labels"), "x", "must be no more than 63 characters")}), RefusedInvalid},
		"the report is too large":   {apierrors.NewRequestEntityTooLargeError("limit is 3145728"), RefusedInvalid},
		"the write is forbidden":    {apierrors.NewForbidden(reports, "uid-1", errors.New("no")), RefusedForbidden},
		"a conflict may pass":       {apierrors.NewConflict(reports, "uid-1", errors.New("changed")), ""},
		"a timeout may pass":        {apierrors.NewServerTimeout(reports, "create", 1), ""},
		"throttling may pass":       {apierrors.NewTooManyRequests("slow down", 1), ""},
		"an unreachable server may": {errors.New("dial tcp: connection refused"), ""},
		"no error":                  {nil, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Refused(tc.err); got != tc.want {
				t.Errorf("Refused(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
