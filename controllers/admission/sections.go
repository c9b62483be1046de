package admission

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// Sections of an admission report.
//
// An AdmissionReport holds one section of results per content hash
// (report.PropertyResourceHash). A review of content the resource does not
// have (forged, or admitted and then never persisted) adds a section of its
// own; it never replaces, evicts or shadows the section of the content the
// resource has, in the API server or in any process's memory, so a restart
// or a failover finds the genuine results where they were written. The
// merger counts only the section of the current content.
//
// Sections are dropped here, when a report is written: a section older than
// sectionGrace whose hash is not the resource's current content (read with
// one GET, only when such a section exists) is gone for good, and past
// maxSections the oldest sections but the current content's are dropped. A
// section younger than sectionGrace is kept whatever the resource holds:
// its request may not be persisted yet.
const (
	sectionGrace = 2 * time.Minute
	maxSections  = 8
	// Reasons a section is dropped (the metric's label).
	prunedContentGone = "content-gone"
	prunedOverflow    = "overflow"
)

// sectionAge is a section's hash and its newest result's time.
type sectionAge struct {
	hash   string
	newest time.Time
}

// sectionAges lists the sections of results, newest first.
func sectionAges(results []wgv1alpha2.PolicyReportResult) []sectionAge {
	byHash := map[string]time.Time{}
	for i := range results {
		h := report.HashOf(&results[i], "")
		t := time.Unix(results[i].Timestamp.Seconds, int64(results[i].Timestamp.Nanos))
		if prev, ok := byHash[h]; !ok || t.After(prev) {
			byHash[h] = t
		}
	}
	out := make([]sectionAge, 0, len(byHash))
	for h, t := range byHash {
		out = append(out, sectionAge{h, t})
	}
	slices.SortFunc(out, func(a, b sectionAge) int { return cmp.Or(b.newest.Compare(a.newest), cmp.Compare(a.hash, b.hash)) })
	return out
}

// prune drops from results (sorted) the sections of content e's resource no
// longer has; see above. Results without a hash (of older writers) are
// never dropped.
func (r *Recorder) prune(ctx context.Context, e *entry, results []wgv1alpha2.PolicyReportResult) []wgv1alpha2.PolicyReportResult {
	ages := sectionAges(results)
	if len(ages) <= 1 {
		return results
	}
	now := r.clock.Now()
	stale := func(s sectionAge) bool { return s.hash != "" && now.Sub(s.newest) >= sectionGrace }
	current, known := "", false
	if len(ages) > maxSections || slices.ContainsFunc(ages, stale) {
		var err error
		current, known, err = r.currentHash(ctx, e)
		if err != nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("the resource's content could not be read; no section of its admission report is dropped as stale", "uid", e.uid, "error", err.Error())
		}
	}
	keep := func(s sectionAge) bool { return s.hash == "" || (known && s.hash == current) }
	room := maxSections // for the sections not kept whatever comes
	for _, s := range ages {
		if keep(s) {
			room--
		}
	}
	drop := map[string]string{}
	for _, s := range ages { // newest first
		switch {
		case keep(s):
		case known && stale(s):
			drop[s.hash] = prunedContentGone
		case room <= 0:
			drop[s.hash] = prunedOverflow
		default:
			room--
		}
	}
	if len(drop) == 0 {
		return results
	}
	for _, reason := range drop {
		r.metrics.pruned.WithLabelValues(reason).Inc()
	}
	return slices.DeleteFunc(slices.Clone(results), func(res wgv1alpha2.PolicyReportResult) bool {
		_, gone := drop[report.HashOf(&res, "")]
		return gone
	})
}

// currentHash reads e's resource and returns its content hash; known is
// false when the resource cannot be read (its type is not known, it is
// gone, the read is refused: the caller then drops nothing as stale).
func (r *Recorder) currentHash(ctx context.Context, e *entry) (hash string, known bool, err error) {
	if e.gvr.Resource == "" || e.owner.Name == "" {
		return "", false, nil
	}
	obj, err := r.client.Resource(e.gvr).Namespace(e.namespace).Get(ctx, e.owner.Name, metav1.GetOptions{})
	if err != nil {
		return "", false, fmt.Errorf("get %s %s/%s: %w", e.gvr, e.namespace, e.owner.Name, err)
	}
	if obj.GetUID() != types.UID(e.uid) {
		return "", false, nil // deleted and created again: another resource
	}
	h, err := report.AdmissionHash(obj.Object)
	if err != nil {
		return "", false, fmt.Errorf("hash %s %s/%s: %w", e.gvr, e.namespace, e.owner.Name, err)
	}
	return report.HashText(h), true, nil
}
