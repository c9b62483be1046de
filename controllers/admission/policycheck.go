package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
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

// checkPolicy says why a policy cannot be evaluated (nil when it can): it
// does not decode into the policy schema, a rule does not compile (a
// pattern, JMESPath, match that cannot work), a background policy reads
// admission-only data (R06), or both admission and background are off.
func checkPolicy(raw []byte, namespaced bool) error {
	var spec *kyvernov1.Spec
	var err error
	if namespaced {
		var p kyvernov1.Policy
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("not a valid Policy: %w", err)
		}
		spec = &p.Spec
		var compiled *engine.Policy
		if compiled, err = engine.CompilePolicy(&p); err == nil {
			err = engine.Malformed(compiled)
		}
	} else {
		var p kyvernov1.ClusterPolicy
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("not a valid ClusterPolicy: %w", err)
		}
		spec = &p.Spec
		var compiled *engine.Policy
		if compiled, err = engine.CompileClusterPolicy(&p); err == nil {
			err = engine.Malformed(compiled)
		}
	}
	if err != nil {
		return err
	}
	if !spec.AdmissionEnabled() && !spec.BackgroundEnabled() {
		return errors.New("spec.admission and spec.background are both false: the policy would never be evaluated")
	}
	return engine.ValidateBackground(spec)
}

// policyRefused is the answer to a policy write that checkPolicy refused.
func policyRefused(req *admissionv1.AdmissionRequest, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
		Message: fmt.Sprintf("policy %s is invalid: %v", req.Name, err),
	}}
}
