package merge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"
)

// No intermediate report outlives its merge (R20).
//
// Once the final report holds what an AdmissionReport says, the merger
// deletes the AdmissionReport (write, then delete, as Kyverno deletes its
// EphemeralReports) and keeps its results in memory as a retained part:
// they still take part in later merges (a background result of another
// rule, a policy change), and a newer AdmissionReport of the resource adds
// to them rather than replacing them (carryRetained), so that a forged
// review can no more erase the results of the content the resource has
// than it could while the report was kept. After a restart the merger reads
// them back from the final reports themselves (seedAdmission): the results
// marked `process: admission review`, and those of policies with background
// off. A retained part is dropped when none of its results is in the final
// report any more (afterMerge) and when its resource is found gone (the
// orphan check).

// deleteMerged deletes the AdmissionReport ref, which the final report of
// uid now holds, unless it changed since (its resourceVersion is a
// precondition: a newer one is merged first), and keeps its results.
func (m *finalWriter) deleteMerged(ctx context.Context, uid string, ref reportRef) error {
	m.mu.Lock()
	st := m.states[uid]
	if st == nil || !st.admission.present || st.admission.retained || st.admission.ref.resourceVersion != ref.resourceVersion || st.admission.ref.name != ref.name {
		m.mu.Unlock()
		return nil // a newer report arrived meanwhile: it is merged (and deleted) in its turn
	}
	st.admission.retained = true
	st.admission.before = nil // merged: there is nothing to undo
	m.mu.Unlock()
	var err error
	if ref.folded {
		err = m.deleteFolded(ctx, uid, ref.resourceVersion)
	} else {
		// Gone already, or rewritten since it was read, is no error: its
		// watch event brings the newer content, merged and deleted in its
		// turn.
		var deleted bool
		deleted, err = m.cl.deleteReport(ctx, sourceKey{ref.gvr, ref.namespace, ref.name}, foldSource{uid: ref.uid, resourceVersion: ref.resourceVersion})
		if deleted {
			m.metrics.merged.WithLabelValues(ref.gvr.Resource).Inc()
		}
	}
	if err == nil {
		return nil
	}
	m.mu.Lock()
	if st := m.states[uid]; st != nil && st.admission.ref.resourceVersion == ref.resourceVersion {
		st.admission.retained = false // tried again with the next merge
	}
	m.mu.Unlock()
	return fmt.Errorf("delete merged %s %s/%s: %w", ref.gvr.Resource, ref.namespace, ref.name, err)
}

// afterMerge settles the admission part of uid once its final report is
// written (or found right): the AdmissionReport merged is deleted, and its
// results kept only while one of them is in the final report (keep) (admission
// results all superseded by newer background ones need no keeping). An
// AdmissionReport with a section that did not count is kept for
// OrphanGrace since it last changed, the time the scan has to catch up with
// a legitimate change of content (the section then counts); past that, the
// section is a forged or failed request's, and goes with its report.
func (m *finalWriter) afterMerge(ctx context.Context, uid string, merged *reportRef, retained, withheld bool, updated time.Time, keep bool) error {
	if merged == nil {
		if retained && !keep {
			m.mu.Lock()
			m.dropRetained(uid)
			m.mu.Unlock()
		}
		return nil
	}
	if withheld {
		if wait := m.opts.OrphanGrace - m.opts.Now().Sub(updated); wait > 0 {
			m.queue.AddAfter(uid, wait)
			return nil
		}
	}
	if err := m.deleteMerged(ctx, uid, *merged); err != nil {
		return err
	}
	if !keep {
		m.mu.Lock()
		m.dropRetained(uid)
		m.mu.Unlock()
	}
	return nil
}

// deleteFolded deletes the admission reports folded into uid's part, once
// the final report holds them; seq, unless empty, must still be the fold's
// (a report folded since is merged, and deleted, in its turn).
func (m *finalWriter) deleteFolded(ctx context.Context, uid, seq string) error {
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
		deleted, err := m.cl.deleteReport(ctx, k, s)
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
