package scan

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/memstore"
)

// Events of background results, on the resource, in Kyverno's shape: a
// Warning with reason PolicyViolation for a violation, and (with
// Options.SuccessEvents, Kyverno's generateSuccessEvents) a Normal one with
// reason PolicyApplied for a pass, reported by the component "kyverno-scan"
// (Kyverno's background scans), with the message
// "policy <policy name>/<rule> <result>: <rule message>".
//
// Unlike Kyverno, which emits them on every background scan, tally emits one
// only when a (resource, policy, rule) result changes to fail (or warn or
// error; to pass for success events): a rescan that changes nothing emits
// nothing, and client-go's event correlation counts repeats of the same
// event instead of creating new ones.
const (
	// ResultEventSource is the reporting component of result Events.
	ResultEventSource = "kyverno-scan"
	// ReasonPolicyViolation and ReasonPolicyApplied are the reasons of
	// result Events.
	ReasonPolicyViolation = "PolicyViolation"
	ReasonPolicyApplied   = "PolicyApplied"
	// maxEventMessage bounds a message (the API server limits an Event's
	// note to 1 KiB).
	maxEventMessage = 1024
)

// resultEvent is one Event to emit about a resource.
type resultEvent struct {
	eventType, reason, message string
}

// resultEvents lists the Events of the results of one resource that changed
// from before to after: those that became a violation (fail, warn, error)
// and, when success is set, those that became a pass.
func resultEvents(before, after []memstore.Result, success bool) []resultEvent {
	prev := make(map[[2]string]string, len(before))
	for _, r := range before {
		e := r.Value()
		prev[[2]string{e.Policy, e.Rule}] = e.Result
	}
	var out []resultEvent
	for _, r := range after {
		e := r.Value()
		if was, ok := prev[[2]string{e.Policy, e.Rule}]; ok && was == e.Result {
			continue // unchanged
		}
		var ev resultEvent
		switch wgv1alpha2.Result(e.Result) {
		case wgv1alpha2.ResultFail, wgv1alpha2.ResultWarn, wgv1alpha2.ResultError:
			ev = resultEvent{corev1.EventTypeWarning, ReasonPolicyViolation, ""}
		case wgv1alpha2.ResultPass:
			if !success {
				continue
			}
			ev = resultEvent{corev1.EventTypeNormal, ReasonPolicyApplied, ""}
		default:
			continue
		}
		ev.message = eventMessage(e)
		out = append(out, ev)
	}
	return out
}

// eventMessage is "policy <name>/<rule> <result>: <message>", the policy
// named by its name alone (a Policy's namespace is not repeated), as Kyverno.
func eventMessage(e memstore.Entry) string {
	name := e.Policy
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	result := e.Result
	if result == string(wgv1alpha2.ResultWarn) {
		result = string(wgv1alpha2.ResultFail) // Kyverno's engine result; warn is a report's view of it
	}
	msg := fmt.Sprintf("policy %s/%s %s: %s", name, e.Rule, result, e.Message)
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-3] + "..."
	}
	return msg
}

// emitResultEvents records the Events of the results of res that changed.
func (s *Scanner) emitResultEvents(res *memstore.Resource, before, after []memstore.Result) {
	if s.opts.ResultRecorder == nil {
		return
	}
	events := resultEvents(before, after, s.opts.SuccessEvents)
	if len(events) == 0 {
		return
	}
	apiVersion := res.Version
	if res.Group != "" {
		apiVersion = res.Group + "/" + res.Version
	}
	ref := &corev1.ObjectReference{APIVersion: apiVersion, Kind: res.Kind, Namespace: res.Namespace, Name: res.Name, UID: types.UID(res.UID)}
	for _, ev := range events {
		s.opts.ResultRecorder.Event(ref, ev.eventType, ev.reason, ev.message)
	}
}
