package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/controllers/catalog"
)

// A policy is checked when it is created or updated, as Kyverno's policy
// webhook does: one that cannot be evaluated is refused with the reason,
// instead of being stored and then rejected by the scanner (which still
// marks such a policy not Ready when it gets in another way: created while
// the webhook was down, or before tally was installed).

// isPolicyWrite reports whether the request creates or updates a kyverno.io
// ClusterPolicy or Policy itself (not its status).
func isPolicyWrite(req *admissionv1.AdmissionRequest) bool {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return false
	}
	return req.Kind.Group == kyvernov1.GroupVersion.Group && (req.Kind.Kind == "ClusterPolicy" || req.Kind.Kind == "Policy") && req.SubResource == ""
}

// checkPolicy says why a policy cannot be evaluated (nil when it can): the
// reasons the webhook's own policy set refuses it for (admissionOf: it
// does not decode into the policy types, a rule does not compile, a
// background policy reads admission-only data, R06), or admission and
// background both off.
func checkPolicy(raw []byte, namespaced bool) error {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	gvr := apiresources.ClusterPolicy
	if namespaced {
		gvr = apiresources.Policy
	}
	// Read without the shared catalog: a policy refused here is never
	// created, and one admitted is read again from its watch.
	p, err := catalog.Read(gvr, u)
	if err == nil {
		_, err = admissionOf(p, u)
	}
	if err != nil {
		return err
	}
	if !enabled(u, "admission") && !enabled(u, "background") {
		return errors.New("spec.admission and spec.background are both false: the policy would never be evaluated")
	}
	return nil
}

// enabled reads spec.<field> of a policy, true unless set false.
func enabled(u *unstructured.Unstructured, field string) bool {
	v, found, err := unstructured.NestedBool(u.Object, "spec", field)
	return !found || err != nil || v
}

// policyRefused is the answer to a policy write that checkPolicy refused.
func policyRefused(req *admissionv1.AdmissionRequest, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
		Message: fmt.Sprintf("policy %s is invalid: %v", req.Name, err),
	}}
}
