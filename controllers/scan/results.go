package scan

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/memstore"
)

// resultSink is where the evaluation's stored results go, and what
// observes them: the results gauge (metrics), the result Events (events.go)
// and the report writer, which hands one BackgroundScanReport per resource
// to the merger (reports.go). The store holds the results; each observer
// keeps only what it needs of them (the gauge's counts, the digest of the
// report last handed over).
type resultSink struct {
	metrics *metrics
	// events, when set, records Events of results that changed; policies
	// name the policy objects they are recorded on.
	events   *policyevents.Emitter
	policies *policySet
	reports  *reportWriter
}

// changed observes a resource's results changing from before to after.
func (rs *resultSink) changed(res *memstore.Resource, before, after []memstore.Result) {
	rs.metrics.count(before, -1)
	rs.metrics.count(after, +1)
	rs.emitResultEvents(res, before, after)
}

// gone observes a resource gone with its results: its report goes.
func (rs *resultSink) gone(uid string, before []memstore.Result) {
	rs.metrics.count(before, -1)
	rs.reports.remove(uid)
}

// publish hands over a resource's report with its results, if its content
// changed since the last hand-over.
func (rs *resultSink) publish(ctx context.Context, res *memstore.Resource, gvr schema.GroupVersionResource, results []memstore.Result) error {
	return rs.reports.ensure(ctx, res, gvr, results)
}

// emitResultEvents records the Events of the results of res that changed.
func (rs *resultSink) emitResultEvents(res *memstore.Resource, before, after []memstore.Result) {
	em := rs.events
	if em == nil || em.Recorder == nil {
		return
	}
	evs := resultEvents(before, after, em.Success)
	if len(evs) == 0 {
		return
	}
	apiVersion := res.Version
	if res.Group != "" {
		apiVersion = res.Group + "/" + res.Version
	}
	ref := &corev1.ObjectReference{APIVersion: apiVersion, Kind: res.Kind, Namespace: res.Namespace, Name: res.Name, UID: types.UID(res.UID)}
	for _, ev := range evs {
		var policy *corev1.ObjectReference
		if tp := rs.policies.get(policyKeyOf(ev.entry)); tp != nil {
			policy = tp.ref
		}
		if ev.applied {
			em.Applied(ref, policy)
			continue
		}
		e := ev.entry
		status, _ := policyevents.StatusOf(wgv1alpha2.Result(e.Result))
		em.Violation(ref, policyevents.Result{Policy: policy, PolicyName: shortName(e.Policy), Rule: e.Rule,
			Status: status, Message: e.Message}, false)
	}
}
