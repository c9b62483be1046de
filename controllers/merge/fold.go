package merge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/catalog"
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

// ephemeralKinds are the kinds of Kyverno 1.13+'s admission reports.
var ephemeralKinds = []schema.GroupVersionResource{apiresources.EphemeralReport, apiresources.ClusterEphemeralReport}

func isEphemeral(gvr schema.GroupVersionResource) bool {
	return gvr == apiresources.EphemeralReport || gvr == apiresources.ClusterEphemeralReport
}

// isAdmissionPart says whether reports of gvr hold admission results: an
// AdmissionReport, or the fold of the admission reports of a resource.
func isAdmissionPart(gvr schema.GroupVersionResource) bool {
	return isAdmission(gvr) || isEphemeral(gvr)
}

// folded says whether the reports of gvr are folded.
func (m *Merger) folded(gvr schema.GroupVersionResource) bool {
	return m.opts.Ingest && isAdmissionPart(gvr)
}

// fold is what the admission reports of one resource say, until the final
// report holds it and they are deleted.
type fold struct {
	// seq counts the changes: the resourceVersion of the admission part it
	// makes, which deleteMerged compares.
	seq int64
	// results are bound to the content hash of their report.
	results []wgv1alpha2.PolicyReportResult
	// Of the newest report: the resource's identity, content hash and
	// audit.kyverno.io/resource.gvr label, and when it was written.
	owner     metav1.OwnerReference
	namespace string
	hash      string
	gvrLabel  string
	at        time.Time
	sources   map[sourceKey]foldSource
}

type sourceKey struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// foldSource is one admission report folded, to delete once merged.
type foldSource struct {
	uid             types.UID
	resourceVersion string
}

// upsertFolded folds one admission report into its resource's part.
func (m *Merger) upsertFolded(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
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
		if _, err := m.deleteReport(ctx, sourceKey{gvr, u.GetNamespace(), u.GetName()}, foldSource{uid: u.GetUID(), resourceVersion: u.GetResourceVersion()}); err != nil {
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

// recordFoldLocked makes f the admission part of uid. Callers hold m.mu.
func (m *Merger) recordFoldLocked(ctx context.Context, uid string, f *fold) {
	gvr := apiresources.EphemeralReport
	if f.namespace == "" {
		gvr = apiresources.ClusterEphemeralReport
	}
	meta := &metav1.ObjectMeta{
		Namespace: f.namespace, Name: uid, ResourceVersion: strconv.FormatInt(f.seq, 10),
		CreationTimestamp: metav1.NewTime(f.at),
		Labels:            map[string]string{report.LabelResourceUID: uid, report.LabelResourceHash: f.hash, report.LabelResourceGVR: f.gvrLabel},
	}
	// The part's results are the fold's (record keeps what it is given).
	m.recordLocked(ctx, gvr, meta, f.owner, slices.Clone(f.results))
	m.states[uid].admission.ref.folded = true
}

// removeFolded forgets a folded report deleted by someone else than the
// merger (by the merger: its results are kept, merged.go). When it was the
// last of its resource's, its results go, as an AdmissionReport's do.
func (m *Merger) removeFolded(gvr schema.GroupVersionResource, namespace, name string) []string {
	key := sourceKey{gvr, namespace, name}
	var touched []string
	for uid, f := range m.folds {
		if _, ok := f.sources[key]; !ok {
			continue
		}
		delete(f.sources, key)
		touched = append(touched, uid)
		if len(f.sources) > 0 {
			continue
		}
		delete(m.folds, uid)
		if st := m.states[uid]; st != nil && st.admission.present && !st.admission.retained && st.admission.ref.folded {
			st.admission = undone(&st.admission)
			if !st.admission.present && !st.background.present {
				delete(m.states, uid)
			}
		}
	}
	return touched
}

// replaceFolded forgets the folded reports of gvr not in a complete list.
// Callers hold m.mu.
func (m *Merger) replaceFolded(gvr schema.GroupVersionResource, present map[string]bool) []string {
	var gone []sourceKey
	for _, f := range m.folds {
		for k := range f.sources {
			if k.gvr == gvr && !present[k.namespace+"/"+k.name] {
				gone = append(gone, k)
			}
		}
	}
	var touched []string
	for _, k := range gone {
		touched = append(touched, m.removeFolded(k.gvr, k.namespace, k.name)...)
	}
	return touched
}

// deleteFolded deletes the admission reports folded into uid's part, once
// the final report holds them; seq, unless empty, must still be the fold's
// (a report folded since is merged, and deleted, in its turn).
func (m *Merger) deleteFolded(ctx context.Context, uid, seq string) error {
	m.mu.Lock()
	f := m.folds[uid]
	if f == nil || (seq != "" && strconv.FormatInt(f.seq, 10) != seq) {
		m.mu.Unlock()
		return nil
	}
	sources := maps.Clone(f.sources)
	m.mu.Unlock()
	var errs []error
	for k, s := range sources {
		deleted, err := m.deleteReport(ctx, k, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			m.metrics.merged.WithLabelValues(k.gvr.Resource).Inc()
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	m.mu.Lock()
	if f := m.folds[uid]; f != nil && (seq == "" || strconv.FormatInt(f.seq, 10) == seq) {
		delete(m.folds, uid)
	}
	m.mu.Unlock()
	return nil
}

// deleteReport deletes one admission report unless it changed since it was
// read (its newer content is merged in its turn): deleted says whether it
// was this call that deleted it. Gone already is no error.
func (m *Merger) deleteReport(ctx context.Context, k sourceKey, s foldSource) (deleted bool, err error) {
	opts := metav1.DeleteOptions{}
	if s.uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &s.uid}
		if s.resourceVersion != "" {
			opts.Preconditions.ResourceVersion = &s.resourceVersion
		}
	}
	err = m.client.Resource(k.gvr).Namespace(k.namespace).Delete(ctx, k.name, opts)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	default:
		return false, fmt.Errorf("delete %s %s/%s: %w", k.gvr.Resource, k.namespace, k.name, err)
	}
}

// sourceBackgroundScan is the audit.kyverno.io/source of the reports of
// Kyverno's background scans and of its background controller.
const sourceBackgroundScan = "background-scan"

// Properties Kyverno's background controller sets on its results: the
// resources a generate rule (or GeneratingPolicy) made, the target a
// mutateExisting rule patched.
const (
	propertyGeneratedResources = "generated-resources"
	propertyPatchedTarget      = "patched-target"
)

// backgroundControllerResult says whether a result is one of Kyverno's
// background controller (generate, mutateExisting, GeneratingPolicy), which
// no background scan computes.
func backgroundControllerResult(r wgv1alpha2.PolicyReportResult) bool {
	_, generated := r.Properties[propertyGeneratedResources]
	_, patched := r.Properties[propertyPatchedTarget]
	// GeneratingPolicies are reported by the background controller only.
	k, ok := catalog.KindOfSource(r.Source)
	return generated || patched || (ok && k.Family == catalog.KyvernoOnly)
}
