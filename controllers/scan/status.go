package scan

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
)

// Values of the Ready condition tally keeps on the policies it reads, as
// Kyverno does: True once the policy is compiled and evaluated, False with
// the reason when it is rejected. Tools (and the conformance suite) wait on it.
const (
	conditionReady = "Ready"
	reasonLoaded   = "Succeeded"
	reasonRejected = "PolicyRejected"
)

// setPolicyStatus records whether the policy is evaluated, unless its status
// already says so for this generation. The patch is conditional on the
// resourceVersion seen: a newer version gets its own update.
func (s *Scanner) setPolicyStatus(gvr schema.GroupVersionResource, u *unstructured.Unstructured, rejected error) {
	parent, running := s.kinds.running()
	// A ValidatingAdmissionPolicy's status is the API server's.
	if s.opts.NoPolicyStatus || !running || gvr == GVRValidatingAdmissionPolicy {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(parent, 30*time.Second)
		defer cancel()
		if err := WriteReady(ctx, s.client, gvr, u, rejected, "the policy is evaluated by tally", fieldManager); err != nil && ctx.Err() == nil {
			s.log().Error(err, "recording the policy's Ready condition failed", "policy", u.GetNamespace()+"/"+u.GetName())
		}
	}()
}

// WriteReady records a policy's Ready condition (ReadyPatch) on its status
// subresource, unless the status already says so. A newer version of the
// policy (conflict) or a deleted one is not an error: the newer version
// gets its own write.
func WriteReady(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, u *unstructured.Unstructured,
	rejected error, loaded, manager string) error {
	patch, changed := ReadyPatch(u, rejected, loaded)
	if !changed {
		return nil
	}
	_, err := client.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manager}, "status")
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ReadyPatch is the merge patch of a policy's status that records whether
// it is evaluated (rejected nil, with message loaded) or refused (with the
// reason), conditional on the policy's resourceVersion. changed is false
// when the status already says so for this generation.
//
// A CEL policy (policies.kyverno.io) keeps them under status.conditionStatus,
// as Kyverno writes its status there.
func ReadyPatch(u *unstructured.Unstructured, rejected error, loaded string) (patch []byte, changed bool) {
	status, reason, message := metav1.ConditionTrue, reasonLoaded, loaded
	if rejected != nil {
		status, reason, message = metav1.ConditionFalse, reasonRejected, rejected.Error()
	}
	path := []string{"status"}
	if strings.HasPrefix(u.GetAPIVersion(), policiesv1.Group+"/") {
		path = []string{"status", "conditionStatus"}
	}
	gen := u.GetGeneration()
	conds, _, _ := unstructured.NestedSlice(u.Object, append(path, "conditions")...)
	next := make([]any, 0, len(conds)+1)
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != conditionReady {
			next = append(next, c)
			continue
		}
		og, _ := m["observedGeneration"].(int64)
		if m["status"] == string(status) && m["reason"] == reason && m["message"] == message && og == gen {
			return nil, false // already recorded
		}
	}
	next = append(next, map[string]any{
		"type": conditionReady, "status": string(status), "reason": reason, "message": message,
		"observedGeneration": gen, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	})
	var body any = map[string]any{"ready": rejected == nil, "conditions": next}
	if len(path) == 2 {
		body = map[string]any{path[1]: body}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
		"status":   body,
	})
	if err != nil { // maps of strings and numbers always encode
		return nil, false
	}
	return patch, true
}
