// Package policyevents records the Events Kyverno records about policy
// results, in Kyverno's shape, through client-go's events library
// (events.k8s.io/v1, so each carries an action, an eventTime and its
// reporting controller):
//
//   - a violation (fail or error) gives the policy a Warning PolicyViolation
//     Event about the resource ("Pod ns/name: [rule] fail; message", with
//     " (blocked)" and the action "Resource Blocked" when the request was
//     denied for it, "Resource Passed" otherwise), and, when the resource was
//     not blocked, gives the resource one about the policy
//     ("policy name/rule fail: message");
//   - with success events on, a policy all of whose results on a resource
//     pass gives the policy a Normal PolicyApplied Event ("Pod ns/name: pass").
//
// A ValidatingAdmissionPolicy's Events are on the ValidatingAdmissionPolicy,
// a CEL policy's on the policy. The background scan reports as
// "kyverno-scan", the admission webhook as "kyverno-admission".
package policyevents

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// Reporting controllers, reasons and actions, as Kyverno names them.
const (
	ControllerScan      = "kyverno-scan"
	ControllerAdmission = "kyverno-admission"

	ReasonViolation = "PolicyViolation"
	ReasonApplied   = "PolicyApplied"

	ActionPassed  = "Resource Passed"
	ActionBlocked = "Resource Blocked"

	// maxNote bounds a note: the API server refuses an Event whose note is
	// longer than 1 KiB.
	maxNote = 1024
)

// omittable are the reasons --omit-events accepts (Kyverno's omitEvents):
// those an Emitter records, and two it never records.
var omittable = []string{ReasonViolation, ReasonApplied, "PolicyError", "PolicySkipped"}

// StatusOf is Kyverno's engine status of a result (a report's warn is an
// engine fail), and whether it is a violation: fail, warn or error.
func StatusOf(result wgv1alpha2.Result) (status string, violation bool) {
	switch result {
	case wgv1alpha2.ResultFail, wgv1alpha2.ResultWarn:
		return string(wgv1alpha2.ResultFail), true
	case wgv1alpha2.ResultError:
		return string(wgv1alpha2.ResultError), true
	}
	return string(result), false
}

// Emitter records result Events. The zero value, and a nil *Emitter, record
// nothing.
type Emitter struct {
	// Recorder records the Events (nil: none).
	Recorder events.EventRecorder
	// Success records PolicyApplied Events (Kyverno's generateSuccessEvents).
	Success bool
	// Omit holds reasons not to record (Kyverno's omitEvents).
	Omit map[string]bool
}

// Result is one rule's result on a resource.
type Result struct {
	// Policy is the policy (nil when it is no longer known: the resource's
	// Event is still recorded); PolicyName its name as Kyverno writes it in
	// a resource's Event (without a namespace).
	Policy     *corev1.ObjectReference
	PolicyName string
	Rule       string
	// Status is Kyverno's engine status: fail or error (a report's warn is
	// an engine fail).
	Status, Message string
}

// Violation records a failed or erroneous result of a rule on resource;
// blocked says the request was denied for it.
func (e *Emitter) Violation(resource *corev1.ObjectReference, r Result, blocked bool) {
	if e == nil || e.Recorder == nil || e.Omit[ReasonViolation] {
		return
	}
	if r.Policy != nil {
		action, suffix := ActionPassed, ""
		if blocked {
			action, suffix = ActionBlocked, " (blocked)"
		}
		note := fmt.Sprintf("%s: [%s] %s%s", Describe(resource), r.Rule, r.Status, suffix)
		if r.Message != "" {
			note += "; " + r.Message
		}
		e.Recorder.Eventf(r.Policy, resource, corev1.EventTypeWarning, ReasonViolation, action, "%s", bound(note))
	}
	if blocked || resource.Name == "" {
		return // a blocked object does not exist; a generated name is not known yet
	}
	note := bound(fmt.Sprintf("policy %s/%s %s: %s", r.PolicyName, r.Rule, r.Status, r.Message))
	if r.Policy == nil {
		// A nil *ObjectReference in the interface would be dereferenced.
		e.Recorder.Eventf(resource, nil, corev1.EventTypeWarning, ReasonViolation, ActionPassed, "%s", note)
		return
	}
	e.Recorder.Eventf(resource, r.Policy, corev1.EventTypeWarning, ReasonViolation, ActionPassed, "%s", note)
}

// Applied records that every result of policy on resource passed, when
// success events are on.
func (e *Emitter) Applied(resource, policy *corev1.ObjectReference) {
	if e == nil || e.Recorder == nil || !e.Success || e.Omit[ReasonApplied] || policy == nil {
		return
	}
	e.Recorder.Eventf(policy, resource, corev1.EventTypeNormal, ReasonApplied, ActionPassed, "%s", bound(Describe(resource)+": pass"))
}

// Describe names a resource as Kyverno's Events do: "Kind ns/name", or
// "Kind name" for a cluster-scoped one.
func Describe(r *corev1.ObjectReference) string {
	if r.Namespace != "" {
		return r.Kind + " " + r.Namespace + "/" + r.Name
	}
	return r.Kind + " " + r.Name
}

// ParseOmit reads a comma-separated list of reasons (Kyverno's omitEvents),
// refusing one it does not know.
func ParseOmit(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, r := range strings.Split(s, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if !slices.Contains(omittable, r) {
			return nil, fmt.Errorf("unknown event reason %q (known: %s)", r, strings.Join(omittable, ", "))
		}
		out[r] = true
	}
	return out, nil
}

func bound(note string) string {
	if len(note) <= maxNote {
		return note
	}
	cut := maxNote - 3
	for cut > 0 && note[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return note[:cut] + "..."
}
