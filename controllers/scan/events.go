package scan

import (
	"strings"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/memstore"
)

// Events of background results, in Kyverno's shape (package policyevents),
// reported as Kyverno's background scans report them ("kyverno-scan"): a
// violation gives the policy and the resource a Warning PolicyViolation
// Event, and (with Options.Events.Success, Kyverno's generateSuccessEvents)
// a policy whose results on a resource all became passes gives the policy a
// Normal PolicyApplied one.
//
// Unlike Kyverno, which emits them on every background scan, tally emits
// them only when a (resource, policy, rule) result changes to fail (or warn
// or error; to pass for success events): a rescan that changes nothing
// emits nothing.

// resultEvent is one Event to emit about a resource: a violation of one
// rule, or (applied) every result of a policy passing.
type resultEvent struct {
	entry   memstore.Entry
	applied bool
}

// resultEvents lists the Events of the results of one resource that changed
// from before to after: those that became a violation (fail, warn, error)
// and, when success is set, one per policy whose results are all passes and
// one of which became a pass.
func resultEvents(before, after []memstore.Result, success bool) []resultEvent {
	prev := make(map[wgv1alpha2.ResultKey]string, len(before))
	for _, r := range before {
		e := r.Value()
		prev[e.Key()] = e.Result
	}
	var out []resultEvent
	passed := map[[2]string]memstore.Entry{} // (source, policy): a result that became a pass
	failing := map[[2]string]bool{}          // (source, policy): a result that is not a pass
	for _, r := range after {
		e := r.Value()
		pol := [2]string{e.Source, e.Policy}
		_, violation := policyevents.StatusOf(wgv1alpha2.Result(e.Result))
		failing[pol] = failing[pol] || violation
		if was, ok := prev[e.Key()]; ok && was == e.Result {
			continue // unchanged
		}
		switch {
		case violation:
			out = append(out, resultEvent{entry: e})
		case wgv1alpha2.Result(e.Result) == wgv1alpha2.ResultPass:
			if _, ok := passed[pol]; !ok && success {
				passed[pol] = e
			}
		}
	}
	for _, r := range after { // in the results' order, once per policy
		e := r.Value()
		pol := [2]string{e.Source, e.Policy}
		if p, ok := passed[pol]; ok && p == e && !failing[pol] {
			out = append(out, resultEvent{entry: e, applied: true})
		}
	}
	return out
}

// shortName is a policy's name without its namespace, as Kyverno names it
// in a resource's Event.
func shortName(policy string) string {
	if i := strings.LastIndexByte(policy, '/'); i >= 0 {
		return policy[i+1:]
	}
	return policy
}

// policyKeyOf is the key (catalog.Key) of the policy of a result.
func policyKeyOf(e memstore.Entry) string {
	return catalog.KeyOfResult(e.Source, e.Policy)
}
