package merge

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/report"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

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

// unadopted is a report waiting for adoption.
type unadopted struct {
	gvr    schema.GroupVersionResource
	report *unstructured.Unstructured
}

// ephemeralKinds are the kinds of Kyverno 1.13+'s admission reports.
var ephemeralKinds = []schema.GroupVersionResource{apiresources.EphemeralReport, apiresources.ClusterEphemeralReport}

func isEphemeral(gvr schema.GroupVersionResource) bool {
	return gvr == apiresources.EphemeralReport || gvr == apiresources.ClusterEphemeralReport
}

func isAdmission(gvr schema.GroupVersionResource) bool {
	return gvr == apiresources.AdmissionReport || gvr == apiresources.ClusterAdmissionReport
}

// isAdmissionPart says whether reports of gvr hold admission results: an
// AdmissionReport, or the fold of the admission reports of a resource.
func isAdmissionPart(gvr schema.GroupVersionResource) bool {
	return isAdmission(gvr) || isEphemeral(gvr)
}

// adoptPrefix marks the queue keys of reports waiting for adoption (a UID
// never starts with it).
const adoptPrefix = "adopt/"

// adoptable says whether a report that names no UID names a resource by
// type, namespace and name.
func adoptable(u *unstructured.Unstructured) bool {
	_, kind, _ := report.ResourceGVR(u.GetLabels())
	return u.GetLabels()[report.LabelResourceUID] == "" && kind != "" && u.GetAnnotations()[report.AnnotationResourceName] != ""
}

// adoptKey is the queue key of a report waiting for adoption.
func adoptKey(gvr schema.GroupVersionResource, namespace, name string) string {
	return adoptPrefix + gvr.Resource + "/" + namespace + "/" + name
}

// isAdoptKey says whether a queue key is a report waiting for adoption.
func isAdoptKey(key string) bool { return strings.HasPrefix(key, adoptPrefix) }

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

// sortNewestFirst orders sections by their newest result, newest first.
func sortNewestFirst(sections []section) {
	slices.SortStableFunc(sections, func(a, b section) int {
		return cmp.Or(cmp.Compare(b.newest.Seconds, a.newest.Seconds), cmp.Compare(b.newest.Nanos, a.newest.Nanos))
	})
}

func hasPolicy(st *resourceState, name string) bool {
	for _, r := range st.admission.results {
		if r.meta.policy == name {
			return true
		}
	}
	for _, r := range st.background.results {
		if r.meta.policy == name {
			return true
		}
	}
	return false
}

// sourceBackgroundScan is the audit.kyverno.io/source of the reports of
// Kyverno's background scans and of its background controller.
const sourceBackgroundScan = "background-scan"

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

// admissionKey is what an admission report's check is keyed by: the
// hashes of its sections.
func admissionKey(a *reportPart) string {
	var key strings.Builder
	for _, s := range a.sections {
		if s.hash == "" {
			continue
		}
		if key.Len() > 0 {
			key.WriteByte(',')
		}
		key.WriteString(s.hash)
	}
	if key.Len() == 0 {
		return unhashed
	}
	return key.String()
}

// unhashed is the key an admission report without hashed sections is
// checked under.
const unhashed = "(no hash)"

// Properties Kyverno's background controller sets on its results: the
// resources a generate rule (or GeneratingPolicy) made, the target a
// mutateExisting rule patched.
const (
	propertyGeneratedResources = "generated-resources"
	propertyPatchedTarget      = "patched-target"
)
