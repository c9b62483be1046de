package scan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
)

// Values of the Ready condition tally keeps on the policies it reads, as
// Kyverno does: True once the policy is compiled and evaluated, False with
// the reason when it is rejected. Tools (and the conformance suite) wait on it.
const (
	conditionReady = "Ready"
	reasonLoaded   = "Succeeded"
	reasonRejected = "PolicyRejected"
	reasonFailed   = "Failed"
)

// The further conditions Kyverno keeps on a CEL policy (policies.kyverno.io)
// under status.conditionStatus, with its messages: tools and Kyverno's own
// tests wait on them. Its status.conditionStatus.ready is true when all are.
const (
	ConditionWebhookConfigured      = "WebhookConfigured"
	ConditionRBACPermissionsGranted = "RBACPermissionsGranted"
)

// Condition is one further status condition of a policy (CEL policies).
type Condition struct {
	Type    string
	True    bool
	Message string
	// Reason, when set, is the condition's reason (else Loaded, Rejected
	// or Failed).
	Reason string
}

// reasonNotEvaluated is the reason of Ready False on a policy none of whose
// rules tally evaluates (R46).
const reasonNotEvaluated = "NotEvaluated"

// notEvaluated is the Ready condition's error of a policy whose every rule
// tally leaves out.
type notEvaluated struct {
	rules []engine.LeftOutRule
	why   string // instead of the rules
}

func (e *notEvaluated) Error() string {
	if e.why != "" {
		return e.why
	}
	return "tally evaluates none of this policy's rules: " + engine.DescribeLeftOut(e.rules) + " " + verbOf(e.rules) + " " + engine.NotEvaluatedNote
}

func verbOf(rules []engine.LeftOutRule) string {
	if len(rules) == 1 {
		return "is"
	}
	return "are"
}

// leftOutError is Ready's error for a policy tally evaluates nothing of, or
// nil.
func leftOutError(p *engine.Policy) error {
	if p.Mutating() && !p.BackgroundEnabled() {
		return &notEvaluated{why: "tally evaluates a MutatingPolicy in background scans only (it runs no mutating webhook), and this policy's are off (spec.evaluation.background.enabled: false)"}
	}
	if p == nil || !p.EvaluatesNothing() {
		return nil
	}
	return &notEvaluated{rules: p.LeftOut}
}

// loadedMessage is Ready's message for a policy tally evaluates: it names
// the rules left out, if any.
func loadedMessage(p *engine.Policy) string {
	const loaded = "the policy is evaluated by tally"
	if p.Mutating() {
		return loaded + " in background scans (tally runs no mutating webhook: it reports nothing of the policy at admission)"
	}
	if p == nil || len(p.LeftOut) == 0 {
		return loaded
	}
	return loaded + ", but for " + engine.DescribeLeftOut(p.LeftOut) + ": " + engine.NotEvaluatedNote
}

// CELConditions are the conditions Kyverno writes on a CEL policy that
// loaded: WebhookConfigured when admission is on (the admission bridge
// evaluates every policy that compiles, and its rules follow the policies),
// RBACPermissionsGranted with the kinds the scanner may not list (forbidden
// nil: it may list them all, or it scans nothing for the policy).
func CELConditions(admission bool, forbidden error) []Condition {
	var out []Condition
	if admission {
		out = append(out, Condition{Type: ConditionWebhookConfigured, True: true, Message: "Webhook configured."})
	}
	rbac := Condition{Type: ConditionRBACPermissionsGranted, True: true, Message: "Policy is ready for reporting."}
	if forbidden != nil {
		rbac = Condition{Type: ConditionRBACPermissionsGranted, Message: "Policy is not ready for reporting, missing permissions: " + forbidden.Error() + "."}
	}
	return append(out, rbac)
}

// webhookWait bounds how long a policy's Ready condition waits for the
// webhook configuration to send its requests to tally.
const webhookWait = 2 * time.Minute

// webhookNotConfigured turns the WebhookConfigured condition among more
// False, with the reason.
func webhookNotConfigured(more []Condition, why string) []Condition {
	out := make([]Condition, len(more))
	for i, c := range more {
		if c.Type == ConditionWebhookConfigured {
			c = Condition{Type: ConditionWebhookConfigured, Message: "Webhook not configured: " + why + "."}
		}
		out[i] = c
	}
	return out
}

// WriteReady records a policy's Ready condition, and the further ones given
// (ReadyPatch), on its status subresource, unless the status already says so. A newer version of the
// policy (conflict) or a deleted one is not an error: the newer version
// gets its own write.
func WriteReady(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, u *unstructured.Unstructured, now time.Time,
	rejected error, loaded, manager string, more ...Condition) error {
	patch, changed := ReadyPatch(u, now, rejected, loaded, more...)
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
// reason), and the further conditions given, conditional on the policy's
// resourceVersion. changed is false when the status already says so for
// this generation. The status's ready is true when every condition is.
//
// A CEL policy (policies.kyverno.io) keeps them under status.conditionStatus,
// as Kyverno writes its status there.
func ReadyPatch(u *unstructured.Unstructured, now time.Time, rejected error, loaded string, more ...Condition) (patch []byte, changed bool) {
	want := []Condition{{Type: conditionReady, True: rejected == nil, Message: loaded}}
	if rejected != nil {
		want[0].Message = rejected.Error()
		if ne := (*notEvaluated)(nil); errors.As(rejected, &ne) {
			want[0].Reason = reasonNotEvaluated
		}
	}
	want = append(want, more...)
	path := []string{"status"}
	if strings.HasPrefix(u.GetAPIVersion(), policiesv1.Group+"/") {
		path = []string{"status", "conditionStatus"}
	}
	gen := u.GetGeneration()
	conds, _, _ := unstructured.NestedSlice(u.Object, append(path, "conditions")...)
	byType := map[string]Condition{}
	ready := true
	for _, c := range want {
		byType[c.Type] = c
		ready = ready && c.True
	}
	next := make([]any, 0, len(conds)+len(want))
	same := 0
	for _, c := range conds {
		m, ok := c.(map[string]any)
		w, mine := byType[fmt.Sprint(m["type"])]
		if !ok || !mine {
			next = append(next, c)
			continue
		}
		status, reason := conditionFields(w)
		if og, _ := m["observedGeneration"].(int64); m["status"] == status && m["reason"] == reason && m["message"] == w.Message && og == gen {
			same++
		}
	}
	if same == len(want) {
		return nil, false // already recorded
	}
	at := now.UTC().Format(time.RFC3339)
	for _, w := range want {
		status, reason := conditionFields(w)
		next = append(next, map[string]any{
			"type": w.Type, "status": status, "reason": reason, "message": w.Message,
			"observedGeneration": gen, "lastTransitionTime": at,
		})
	}
	var body any = map[string]any{"ready": ready, "conditions": next}
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

// conditionFields are a condition's status and reason, as Kyverno sets them.
func conditionFields(c Condition) (status, reason string) {
	switch {
	case c.True:
		return string(metav1.ConditionTrue), reasonLoaded
	case c.Reason != "":
		return string(metav1.ConditionFalse), c.Reason
	case c.Type == conditionReady:
		return string(metav1.ConditionFalse), reasonRejected
	}
	return string(metav1.ConditionFalse), reasonFailed
}

// fieldManager names the scanner in the API server's managedFields.
const fieldManager = "tally-scanner"
