package scan

import (
	"encoding/json"
	"hash/fnv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

// policySet is the policies the scanner knows, by key (catalog.Key): those
// scanned in the background and those kept for admission only. It is the
// only holder of compiled policies; every method is safe for concurrent use.
type policySet struct {
	mu    sync.Mutex
	byKey map[string]*trackedPolicy
}

func newPolicySet() *policySet { return &policySet{byKey: map[string]*trackedPolicy{}} }

func (ps *policySet) get(key string) *trackedPolicy {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.byKey[key]
}

// put replaces the policy of tp's key and returns the one it replaced.
func (ps *policySet) put(tp *trackedPolicy) (prev *trackedPolicy) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	prev = ps.byKey[tp.name]
	ps.byKey[tp.name] = tp
	return prev
}

// remove forgets a policy and reports whether it was known.
func (ps *policySet) remove(key string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	_, ok := ps.byKey[key]
	delete(ps.byKey, key)
	return ok
}

// active returns the policies background scans evaluate.
func (ps *policySet) active() []*trackedPolicy {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]*trackedPolicy, 0, len(ps.byKey))
	for _, tp := range ps.byKey {
		if tp.background {
			out = append(out, tp)
		}
	}
	return out
}

// keysOf returns the keys of the policies read from one kind.
func (ps *policySet) keysOf(gvr schema.GroupVersionResource) []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []string
	for key, tp := range ps.byKey {
		if tp.gvr == gvr {
			out = append(out, key)
		}
	}
	return out
}

// resolve returns the policies a name of an exception's list stands for:
// the policy of that key, or for "NamespacedValidatingPolicy/x" (an
// exception does not name the namespace) that name in every namespace.
func (ps *policySet) resolve(name string) []*trackedPolicy {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if tp, ok := ps.byKey[name]; ok {
		return []*trackedPolicy{tp}
	}
	var prefix, plain string
	ok := false
	for _, k := range catalog.Kinds(catalog.CEL) {
		if !k.Namespaced {
			continue
		}
		prefix = k.KeyPrefix
		if plain, ok = strings.CutPrefix(name, prefix); ok {
			break
		}
	}
	if !ok || strings.Contains(plain, "/") {
		return nil
	}
	var out []*trackedPolicy
	for key, tp := range ps.byKey {
		if strings.HasPrefix(key, prefix) && strings.HasSuffix(key, "/"+plain) {
			out = append(out, tp)
		}
	}
	return out
}

// trackedPolicy is what the scanner knows of a policy it scans.
type trackedPolicy struct {
	// name is the policy's key (catalog.Key).
	name string
	gvr  schema.GroupVersionResource
	// ref refers to the policy object, for Events.
	ref        *corev1.ObjectReference
	compiled   *engine.Policy
	units      map[string]engine.Unit
	ruleHashes map[string]uint64
	// ruleKinds are the kinds each rule can match.
	ruleKinds map[string][]schema.GroupVersionResource
	schedule  schedule
	// background is false for policies kept only for admission.
	background bool
}

// ruleHashes hashes each validate rule together with the policy-level
// settings that change its results, so that a status-only or cosmetic update
// changes nothing and an edit of one rule changes one hash.
func ruleHashes(p *engine.Policy, units []engine.Unit) map[string]uint64 {
	shared, _ := json.Marshal([]any{p.Scored, p.Category, p.Severity, p.Spec.ApplyRules, p.Namespace})
	out := make(map[string]uint64, len(units))
	for _, u := range units {
		data, _ := json.Marshal(u.Raw) // plain API types: cannot fail
		h := fnv.New64a()              // a hash.Hash's Write never returns an error
		_, _ = h.Write(shared)
		_, _ = h.Write(data)
		out[u.Name] = h.Sum64()
	}
	return out
}

// newTracked is a scanned policy with its units and their hashes (the
// kinds each can match are resolved by the caller).
func newTracked(name string, gvr schema.GroupVersionResource, compiled *engine.Policy) *trackedPolicy {
	units := compiled.Units()
	tp := &trackedPolicy{name: name, gvr: gvr, compiled: compiled, ruleHashes: ruleHashes(compiled, units),
		units: make(map[string]engine.Unit, len(units)), ruleKinds: map[string][]schema.GroupVersionResource{}, background: true}
	for _, u := range units {
		tp.units[u.Name] = u
	}
	return tp
}

func (tp *trackedPolicy) kinds() []schema.GroupVersionResource {
	seen := map[schema.GroupVersionResource]bool{}
	var out []schema.GroupVersionResource
	for _, gvrs := range tp.ruleKinds {
		for _, g := range gvrs {
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	return out
}

// mayMatch is a cheap pre-filter: the policy has a rule for the resource's
// kind (and, for a Policy, namespace). The engine decides the rest.
func (tp *trackedPolicy) mayMatch(res *memstore.Resource, gvr schema.GroupVersionResource) bool {
	if tp.compiled.Namespace != "" && tp.compiled.Namespace != res.Namespace {
		return false
	}
	for _, gvrs := range tp.ruleKinds {
		for _, g := range gvrs {
			if g == gvr {
				return true
			}
		}
	}
	return false
}

// applies reports whether some rule of the policy selects the resource
// (compiled matchers: cheap), so that resources no rule can match cost no
// evaluation.
func (tp *trackedPolicy) applies(obj map[string]any, nsLabels map[string]string, gvr schema.GroupVersionResource) bool {
	for _, u := range tp.units {
		if u.Err != nil || u.Applies(obj, nsLabels, gvr) {
			return true // a broken rule reports its error where its kinds match
		}
	}
	return false
}
