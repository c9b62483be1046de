package merge

import (
	"context"
	"slices"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// Kyverno's admission reports, read by the merger itself (Options.Ingest).
//
// Beside Kyverno, its admission controller writes an EphemeralReport per
// request (Kyverno 1.13+; a kyverno.io AdmissionReport per request in
// 1.10-1.12). The merger reads them straight from the API server: the
// admission reports of a resource, of every kind and writer (tally's own
// webhook's included), are folded into one admission part (the newest
// result per content, policy and rule, as tally's webhook folds its
// requests), merged as one AdmissionReport would be, and deleted once the
// final report holds them (merged.go). No report of tally's stands between
// Kyverno's and the final one. Until they are deleted they stay in the API
// server, so a merger that restarts first reads them again.

// intake is the watches' Sink: it records the policies and intermediate
// reports in the state and queues the resources they concern (sink.go),
// folds and adopts Kyverno's admission reports (fold.go, adopt.go).
type intake struct {
	*state
	cl *cluster
}

// upsertFolded folds one admission report into its resource's part.
func (m *intake) upsertFolded(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	log := logr.FromContextOrDiscard(ctx)
	labels := u.GetLabels()
	if u.GetDeletionTimestamp() != nil {
		return // going away
	}
	backgroundController := false
	if isEphemeral(gvr) && labels[report.LabelSource] != "" && labels[report.LabelSource] != "admission" {
		// A background scan's ephemeral report: Kyverno's reports
		// controller's (off beside tally: tally's scan replaces it) is not
		// admission output. Kyverno's background controller writes its
		// generate and mutateExisting results (and GeneratingPolicy's) the
		// same way, on the trigger's report: those are folded (R45).
		if labels[report.LabelSource] != sourceBackgroundScan {
			return
		}
		backgroundController = true
	}
	var r kyvernov2.AdmissionReport // every admission kind has this shape
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		log.Error(err, "admission report could not be read; ignored", "kind", gvr.Resource, "name", u.GetNamespace()+"/"+u.GetName())
		return
	}
	results, err := report.IntermediateResults(r.Spec.Results, u.GetAnnotations())
	if err != nil {
		log.Error(err, "admission report's results partly unreadable; the rest are used", "kind", gvr.Resource, "name", u.GetNamespace()+"/"+u.GetName())
	}
	if backgroundController {
		results = slices.DeleteFunc(results, func(r wgv1alpha2.PolicyReportResult) bool { return !backgroundControllerResult(r) })
		if len(results) == 0 {
			return // a background scan's report: not the merger's to merge or delete
		}
	}
	owner, namespace, named := report.ReportOwner(u, r.Spec.Owner)
	if !named && namespace == u.GetNamespace() && isEphemeral(gvr) && adoptable(u) {
		// Kyverno's mutating webhook's report of a CREATE: the resource
		// had no UID yet (adopt.go).
		m.mu.Lock()
		key := m.awaitAdoptionLocked(gvr, u)
		m.mu.Unlock()
		m.queue.Add(key)
		return
	}
	if !named || namespace != u.GetNamespace() {
		// Nothing to report on (or a resource of another namespace, whose
		// report is not written here): deleted, so that such reports do
		// not pile up, as Kyverno's reports controller would.
		m.metrics.unusable.Inc()
		log.Info("admission report names no resource of its namespace; deleted without merging it", "kind", gvr.Resource, "namespace", u.GetNamespace(), "name", u.GetName())
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := m.cl.deleteReport(ctx, sourceKey{gvr, u.GetNamespace(), u.GetName()}, foldSource{uid: u.GetUID(), resourceVersion: u.GetResourceVersion()}); err != nil {
			log.Error(err, "deleting an unusable admission report failed; tried again at its next event")
		}
		return
	}
	at := u.GetCreationTimestamp().Time
	for i := range results {
		t := time.Unix(results[i].Timestamp.Seconds, int64(results[i].Timestamp.Nanos))
		if results[i].Timestamp == (metav1.Timestamp{}) {
			results[i].Timestamp = metav1.Timestamp{Seconds: at.Unix()}
		} else if t.After(at) {
			at = t
		}
	}
	hash := labels[report.LabelResourceHash]
	results = report.BindHash(results, hash)
	uid := string(owner.UID)
	key := sourceKey{gvr, u.GetNamespace(), u.GetName()}

	m.mu.Lock()
	f := m.folds[uid]
	if f == nil {
		f = &fold{sources: map[sourceKey]foldSource{}}
		m.folds[uid] = f
	}
	if src, ok := f.sources[key]; ok && src.resourceVersion == u.GetResourceVersion() {
		m.mu.Unlock()
		return // seen already (a relist)
	}
	f.sources[key] = foldSource{uid: u.GetUID(), resourceVersion: u.GetResourceVersion()}
	f.results = report.FoldAdmission(f.results, results)
	if f.owner.UID == "" || !at.Before(f.at) {
		f.owner, f.namespace, f.hash, f.at = owner, namespace, hash, at
		if l := labels[report.LabelResourceGVR]; l != "" {
			f.gvrLabel = l
		}
	}
	m.foldSeq++ // never reused: a merge in flight can tell a fold made since
	f.seq = m.foldSeq
	m.recordFoldLocked(ctx, uid, f)
	m.mu.Unlock()
	m.queue.Add(uid)
}
