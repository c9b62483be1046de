package report

import (
	"cmp"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// PropertyResourceHash binds an admission result to the content it was
// computed for: the content hash (ContentHash, in hex) of the object the
// admission review carried. An AdmissionReport keeps one section of results
// per hash, so a review whose object is not the resource's content (a
// forged one, or a request admitted and then never persisted) adds a
// section of its own and never replaces the results of the content the
// resource has. The merger counts the section of the current content and
// strips the property: final reports never carry it.
const PropertyResourceHash = "tally.dev/resource.hash"

// HashOf is the content hash a result is bound to, or fallback when it
// carries none (a report written before sections, or an ingested one).
func HashOf(r *wgv1alpha2.PolicyReportResult, fallback string) string {
	if h, ok := r.Properties[PropertyResourceHash]; ok {
		return h
	}
	return fallback
}

// BindHash returns results with each entry that carries no hash bound to
// hash. Entries are copied with their own Properties map (a result's map
// may be shared); results already bound keep their hash. An empty hash
// binds nothing.
func BindHash(results []wgv1alpha2.PolicyReportResult, hash string) []wgv1alpha2.PolicyReportResult {
	if hash == "" {
		return results
	}
	out := make([]wgv1alpha2.PolicyReportResult, len(results))
	for i, r := range results {
		if _, ok := r.Properties[PropertyResourceHash]; !ok {
			props := make(map[string]string, len(r.Properties)+1)
			maps.Copy(props, r.Properties)
			props[PropertyResourceHash] = hash
			r.Properties = props
		}
		out[i] = r
	}
	return out
}

// Section is the admission results of one content hash.
type Section struct {
	Hash    string
	Results []wgv1alpha2.PolicyReportResult
}

// Sections splits admission results by the hash they are bound to (entries
// without one belong to fallback), in order of first appearance. The
// entries keep their Properties as they are, the hash included: a reader
// that copies them on ignores PropertyResourceHash (the merger's compact
// form does).
func Sections(results []wgv1alpha2.PolicyReportResult, fallback string) []Section {
	if len(results) == 0 {
		return nil
	}
	first := HashOf(&results[0], fallback)
	same := true
	for i := 1; i < len(results) && same; i++ {
		same = HashOf(&results[i], fallback) == first
	}
	if same { // one content, as nearly always: no copy
		return []Section{{Hash: first, Results: results}}
	}
	var out []Section
	index := map[string]int{}
	for _, r := range results {
		h := HashOf(&r, fallback)
		i, ok := index[h]
		if !ok {
			i = len(out)
			index[h] = i
			out = append(out, Section{Hash: h})
		}
		out[i].Results = append(out[i].Results, r)
	}
	return out
}

// FoldAdmission keeps the newest result per (content hash, source, policy,
// rule) of both lists; on a tie the second list (the incoming one) wins.
// Results of one content never replace those of another: a review of
// content the resource does not have adds a section of its own. The output
// is sorted by policy, rule and content hash.
func FoldAdmission(have, incoming []wgv1alpha2.PolicyReportResult) []wgv1alpha2.PolicyReportResult {
	type key struct {
		hash string
		wgv1alpha2.ResultKey
	}
	keyOf := func(r *wgv1alpha2.PolicyReportResult) key {
		k := key{HashOf(r, ""), r.Key()}
		if k.Source == "" {
			k.Source = Source // older writers leave the classic source out
		}
		return k
	}
	byKey := make(map[key]wgv1alpha2.PolicyReportResult, len(have)+len(incoming))
	for _, r := range have {
		k := keyOf(&r)
		if prev, ok := byKey[k]; !ok || later(r.Timestamp, prev.Timestamp) {
			byKey[k] = r
		}
	}
	for _, r := range incoming {
		k := keyOf(&r)
		if prev, ok := byKey[k]; !ok || !later(prev.Timestamp, r.Timestamp) {
			byKey[k] = r
		}
	}
	out := make([]wgv1alpha2.PolicyReportResult, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b wgv1alpha2.PolicyReportResult) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Rule, b.Rule),
			cmp.Compare(HashOf(&a, ""), HashOf(&b, "")), cmp.Compare(a.Source, b.Source))
	})
	return out
}

// later reports whether timestamp a is strictly later than b.
func later(a, b metav1.Timestamp) bool {
	if a.Seconds != b.Seconds {
		return a.Seconds > b.Seconds
	}
	return a.Nanos > b.Nanos
}
