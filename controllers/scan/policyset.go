package scan

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
)

// policySet is the policies the scanner knows, by key (apiresources.PolicyKey): those
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
	prefix := policiesv1.KindNamespacedValidatingPolicy + "/"
	plain, ok := strings.CutPrefix(name, prefix)
	if !ok {
		prefix = policiesv1.KindNamespacedMutatingPolicy + "/"
		plain, ok = strings.CutPrefix(name, prefix)
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
