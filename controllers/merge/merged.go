package merge

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
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
func (m *Merger) deleteMerged(ctx context.Context, uid string, ref reportRef) error {
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
		deleted, err = m.deleteReport(ctx, sourceKey{ref.gvr, ref.namespace, ref.name}, foldSource{uid: ref.uid, resourceVersion: ref.resourceVersion})
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

// carryRetained returns the sections of a retained admission part (prev,
// or the one prev replaced when prev itself was not merged yet) that a
// newer report of the same resource keeps: the section that last counted
// (the results of the content the resource had, which a forged review for
// other content must not erase) unless the newer report has that content's
// section itself, and the results read back from the final report
// (seededHash) unless the newer report has results bound to the content
// they were verified for. Callers hold m.mu.
//
// ownHandler says which results another of Kyverno's handlers writes than
// the one of the policy's validate rules (mutate, generate, verifyImages:
// PolicyInfo.KyvernoOnly and OtherHandler): each of those rules stands apart.
func carryRetained(prev *reportPart, next []section, ownHandler func(source, policy, rule string) bool) []section {
	if prev.present && !prev.retained && prev.before != nil && prev.before.retained {
		// prev, not merged yet, is replaced (a fold of Kyverno's reports
		// made again with one more): what the last merge kept is carried
		// as it was into prev.
		prev = prev.before
	}
	if !prev.present || !prev.retained {
		return next
	}
	has := func(hash string) bool {
		return slices.ContainsFunc(next, func(s section) bool { return s.hash == hash })
	}
	out := slices.Clone(next)
	if prev.lastGoodHash != "" && !has(prev.lastGoodHash) && len(prev.lastGood) > 0 {
		newest := metav1.Timestamp{}
		for _, s := range prev.sections {
			if s.hash == prev.lastGoodHash || s.hash == seededHash {
				newest = s.newest
			}
		}
		out = append(out, section{hash: prev.lastGoodHash, results: prev.lastGood, newest: newest})
	} else if prev.lastGoodHash == "" {
		for _, s := range prev.sections {
			if s.hash == seededHash {
				out = append(out, s)
			}
		}
	}
	out = carryOtherHandlers(prev, out, ownHandler)
	sortNewestFirst(out)
	return out
}

// carryOtherHandlers carries the retained results (Kyverno's) of the
// policies the newer sections of the same content hash (or, for results
// without one, the newer unhashed section) do not name. Kyverno 1.19
// writes a report per webhook handler for one request (classic Enforce,
// classic Audit, ValidatingPolicy, its mutating webhook), at other times: a report merged and deleted before the next one of
// the same request arrived must not take the other handlers' results with
// it. A newer report stands for the policies it names (a rule of theirs it
// no longer has is dropped), as Kyverno's reports controller replaces a
// policy's entries. The results of a rule another handler writes
// (ownHandler: Kyverno's mutating webhook, its background controller)
// stand apart: a newer report stands for such a rule only when it names
// the rule. A retained hashed section the newer ones have no section of is
// left to carryRetained (the content that last counted). Callers hold m.mu.
func carryOtherHandlers(prev *reportPart, next []section, ownHandler func(source, policy, rule string) bool) []section {
	// A policy's results go together (rule ""), another handler's rule's
	// apart.
	keyOf := func(r compactResult) wgv1alpha2.ResultKey {
		k := wgv1alpha2.ResultKey{Source: r.meta.source, Policy: r.meta.policy}
		if ownHandler != nil && ownHandler(r.meta.source, r.meta.policy, r.meta.rule) {
			k.Rule = r.meta.rule
		}
		return k
	}
	named := map[string]map[wgv1alpha2.ResultKey]bool{} // by content hash
	index := map[string]int{}
	for i, s := range next {
		if s.hash == seededHash {
			continue
		}
		index[s.hash] = i
		if named[s.hash] == nil {
			named[s.hash] = map[wgv1alpha2.ResultKey]bool{}
		}
		for _, r := range s.results {
			named[s.hash][keyOf(r)] = true
		}
	}
	out := slices.Clone(next)
	for _, s := range prev.sections {
		if s.hash == seededHash {
			continue
		}
		i, ok := index[s.hash]
		if !ok && s.hash != "" {
			continue // carryRetained's
		}
		var carried []compactResult
		for _, r := range s.results {
			if !named[s.hash][keyOf(r)] {
				carried = append(carried, r)
			}
		}
		if len(carried) == 0 {
			continue
		}
		if !ok {
			out = append(out, section{results: carried, newest: s.newest})
			index[s.hash] = len(out) - 1
			named[s.hash] = map[wgv1alpha2.ResultKey]bool{}
			for _, r := range carried {
				named[s.hash][keyOf(r)] = true
			}
			continue
		}
		merged := out[i]
		merged.results = append(slices.Clone(merged.results), carried...)
		if after(s.newest, merged.newest) {
			merged.newest = s.newest
		}
		out[i] = merged
	}
	return out
}

// undone is what an admission part becomes when its report is deleted by
// someone else before the merger merged it: what it was before that report
// came (a retained part: the results of an earlier merge), or nothing. A
// forged review reusing a real UID, its report then deleted, must not take
// the genuine results with it (issue 39); a report deleted before its
// merge takes only its own results. Callers hold m.mu.
func undone(p *reportPart) reportPart {
	if p.before == nil {
		return reportPart{}
	}
	return *p.before
}

// seededHash marks the section of admission results read back from a final
// report: they were verified before that report was written, and count for
// the content the resource has while it exists (verify.go).
const seededHash = "(final report)"

// seed is what a final report read at start-up holds, until the policies
// are listed (seedAdmission).
type seed struct {
	subject report.Subject
	results []compactResult
}

// keepSeed holds the results of a final report read at start-up until the
// policies are listed. Callers hold m.mu.
func (m *Merger) keepSeed(r *wgv1alpha2.PolicyReport, s report.Subject) {
	if len(r.Results) == 0 {
		return
	}
	if m.seeds == nil {
		m.seeds = map[string]seed{}
	}
	m.seeds[string(s.UID)] = seed{subject: s, results: m.compact(r.Results)}
}

// seedAdmission keeps, as retained admission parts, the results of the final
// reports read at start-up that no scan recomputes: those of policies with
// background off, and those marked as admission results. (Their process
// property alone cannot tell: Kyverno derives it from the policy's
// background setting.) Callers hold m.mu, once every kind is listed.
func (m *Merger) seedAdmission() {
	for uid, sd := range m.seeds {
		var kept []compactResult
		for _, r := range sd.results {
			info, known := m.policies[PolicyKey(r.meta.source, r.meta.policy)]
			if r.meta.properties[report.PropertyProcess] == report.ProcessAdmission || (known && !info.Background) {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			continue
		}
		s := sd.subject
		gvr := apiresources.AdmissionReport
		if s.Namespace == "" {
			gvr = apiresources.ClusterAdmissionReport
		}
		sec := section{hash: seededHash, results: kept}
		for _, r := range kept {
			if at := (metav1.Timestamp{Seconds: r.seconds, Nanos: r.nanos}); after(at, sec.newest) {
				sec.newest = at
			}
		}
		st := m.states[uid]
		if st == nil {
			st = &resourceState{subject: report.Subject{APIVersion: m.intern(s.APIVersion), Kind: m.intern(s.Kind), Namespace: m.intern(s.Namespace), Name: s.Name, UID: s.UID}}
			m.states[uid] = st
		}
		if a := &st.admission; a.present {
			// A report of the resource came while the merger was down (a
			// forged review's, say): the results read back count beside it
			// unless a newer section of it counts (verify.go).
			a.sections = append(a.sections, sec)
			sortNewestFirst(a.sections)
			a.results = append(a.results, kept...)
			continue
		}
		st.admission = reportPart{present: true, retained: true, sections: []section{sec}, results: kept,
			ref: reportRef{gvr: gvr, namespace: s.Namespace, name: uid}}
		st.updated = m.opts.Now()
	}
	m.seeds = nil
}

// dropRetained forgets the retained admission results of uid: superseded,
// or their resource is gone. Callers hold m.mu.
func (m *Merger) dropRetained(uid string) {
	st := m.states[uid]
	if st == nil || !st.admission.retained {
		return
	}
	st.admission = reportPart{}
	if !st.background.present {
		delete(m.states, uid)
	}
}

// chosenFrom says whether a final result is one of admission's (the merge
// chose it over the background results). It goes by the result itself, not
// by its process property, which Kyverno derives from the policy's
// background setting rather than from where the result came from.
func chosenFrom(final, admission []wgv1alpha2.PolicyReportResult) bool {
	if len(admission) == 0 {
		return false
	}
	// The rule and the time: the merge may turn a fail into a warn (R24).
	type key struct {
		wgv1alpha2.ResultKey
		at metav1.Timestamp
	}
	from := make(map[key]bool, len(admission))
	for _, r := range admission {
		from[key{r.Key(), r.Timestamp}] = true
	}
	return slices.ContainsFunc(final, func(r wgv1alpha2.PolicyReportResult) bool {
		return from[key{r.Key(), r.Timestamp}]
	})
}

// afterMerge settles the admission part of uid once its final report is
// written (or found right): the AdmissionReport merged is deleted, and its
// results kept only while one of them is in the final report (keep) (admission
// results all superseded by newer background ones need no keeping). An
// AdmissionReport with a section that did not count is kept for
// OrphanGrace since it last changed, the time the scan has to catch up with
// a legitimate change of content (the section then counts); past that, the
// section is a forged or failed request's, and goes with its report.
func (m *Merger) afterMerge(ctx context.Context, uid string, merged *reportRef, retained, withheld bool, updated time.Time, keep bool) error {
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
