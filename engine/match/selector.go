package match

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// pair is a key and a value, either of which may hold wildcards.
type pair struct {
	key, value string
	keyWild    bool // key holds a wildcard
}

func newPair(k, v string) pair { return pair{key: k, value: v, keyWild: hasWildcard(k)} }

// selector is a compiled label selector. Kyverno lets the keys and values of
// matchLabels hold wildcards (`*`, `?`); such an entry holds when some label
// of the object matches both its key and its value. The other entries and
// matchExpressions are an ordinary Kubernetes selector.
type selector struct {
	wild []pair
	// plain is nil when the selector has no ordinary requirement.
	plain labels.Selector
}

func compileSelector(ls *metav1.LabelSelector) (*selector, error) {
	s := &selector{}
	plain := &metav1.LabelSelector{MatchExpressions: ls.MatchExpressions}
	for k, v := range ls.MatchLabels {
		if hasWildcard(k) || hasWildcard(v) {
			s.wild = append(s.wild, newPair(k, v))
			continue
		}
		if plain.MatchLabels == nil {
			plain.MatchLabels = map[string]string{}
		}
		plain.MatchLabels[k] = v
	}
	sort.Slice(s.wild, func(i, j int) bool { return s.wild[i].key < s.wild[j].key })
	sel, err := metav1.LabelSelectorAsSelector(plain)
	if err != nil {
		return nil, fmt.Errorf("invalid label selector: %w", err)
	}
	if !sel.Empty() {
		s.plain = sel
	}
	return s, nil
}

// matches reports whether the labels satisfy the selector. nil labels are
// treated as no labels. It does not allocate.
func (s *selector) matches(lbls map[string]string) bool {
	for _, w := range s.wild {
		if !anyEntryMatches(w, lbls) {
			return false
		}
	}
	return s.plain == nil || s.plain.Matches(labels.Set(lbls))
}

// anyEntryMatches reports whether some entry of m matches the key and value
// patterns of p.
func anyEntryMatches(p pair, m map[string]string) bool {
	if !p.keyWild {
		v, ok := m[p.key]
		return ok && wildcardMatch(p.value, v)
	}
	for k, v := range m {
		if wildcardMatch(p.key, k) && wildcardMatch(p.value, v) {
			return true
		}
	}
	return false
}
