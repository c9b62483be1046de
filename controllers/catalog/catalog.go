// Package catalog is the one table of the policy kinds (kinds.go: a
// descriptor per kind, which every controller asks rather than naming a
// kind) and the one place every controller converts and compiles policy
// objects into compiled policies. In
// tally-scanner the scan and the admission bridge share one Catalog, so
// that each version of a policy is compiled once for both.
package catalog

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
)

// Policy is a policy object as the controllers read it. It is shared:
// nothing of it may be changed.
type Policy struct {
	// Key is the policy's key (Key).
	Key string
	GVR schema.GroupVersionResource
	// Object is the typed policy (*kyvernov1.ClusterPolicy,
	// *kyvernov1.Policy, *policiesv1.ValidatingPolicy,
	// *policiesv1.MutatingPolicy or *policiesv1.ImageValidatingPolicy), for
	// Events.
	Object   runtime.Object
	Compiled *engine.Policy
	// Spec is a ClusterPolicy's or Policy's spec, CEL a ValidatingPolicy
	// or NamespacedValidatingPolicy, Mutating a MutatingPolicy or
	// NamespacedMutatingPolicy, Image an ImageValidatingPolicy or
	// NamespacedImageValidatingPolicy: each nil for the other kinds.
	Spec     *kyvernov1.Spec
	CEL      *policiesv1.ValidatingPolicy
	Mutating *policiesv1.MutatingPolicy
	Image    *policiesv1.ImageValidatingPolicy
}

// IsPolicyKind reports whether a Catalog reads objects of gvr (the kinds
// compiled alone: Kind.Compiled).
func IsPolicyKind(gvr schema.GroupVersionResource) bool {
	k, ok := KindOf(gvr)
	return ok && k.Compiled()
}

// Read converts and compiles a policy object, without a Catalog. A policy
// that does not compile is returned with the error when it could be
// converted (its Object names it in Events).
func Read(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (*Policy, error) {
	k, ok := KindOf(gvr)
	if !ok || !k.Compiled() {
		return nil, fmt.Errorf("%s is not a policy kind", gvr.String())
	}
	p, err := k.read(u)
	if p != nil {
		p.Key, p.GVR = k.Key(u.GetNamespace(), u.GetName()), gvr
	}
	return p, err
}

// verifyDigestByDefault sets verifyDigest on the verifyImages entries of
// a policy read from the cluster that leave it out: Kyverno's CRD defaults
// it to true, so that a policy stored with Kyverno's CRDs has it, and
// Kyverno's messages then name the image by its resolved digest (seen
// beside the real Kyverno 1.19, issue 55); tally's CRD keeps verifyImages
// as written. A policy read from a file (the CLI) is not defaulted, as
// Kyverno's CLI does not default it.
func verifyDigestByDefault(spec *kyvernov1.Spec) {
	for i := range spec.Rules {
		vi := spec.Rules[i].VerifyImages
		if vi == nil {
			continue
		}
		var entries []map[string]any
		if json.Unmarshal(vi.Raw, &entries) != nil {
			continue // the engine reports it
		}
		changed := false
		for _, e := range entries {
			if _, ok := e["verifyDigest"]; !ok {
				e["verifyDigest"] = true
				changed = true
			}
		}
		if raw, err := json.Marshal(entries); err == nil && changed {
			vi.Raw = raw
		}
	}
}

// Catalog remembers the newest version of each policy it read, so that the
// readers of one process compile a version once. Its methods are safe for
// concurrent use; a nil Catalog remembers nothing.
type Catalog struct {
	mu    sync.Mutex
	byKey map[string]entry
	// compiles counts the versions compiled (for tests and diagnostics).
	compiles atomic.Int64
}

type entry struct {
	gvr             schema.GroupVersionResource
	resourceVersion string
	policy          *Policy
	err             error
}

// New makes an empty Catalog.
func New() *Catalog { return &Catalog{byKey: map[string]entry{}} }

// Read returns the compiled policy of an object: remembered when this
// version (its resourceVersion) was read before, by any reader, else read
// and remembered. An object without a resourceVersion is read every time.
func (c *Catalog) Read(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (*Policy, error) {
	rv := u.GetResourceVersion()
	if c == nil || rv == "" {
		return Read(gvr, u)
	}
	key := gvr.String() + "|" + u.GetNamespace() + "/" + u.GetName()
	c.mu.Lock()
	e, ok := c.byKey[key]
	c.mu.Unlock()
	if ok && e.resourceVersion == rv {
		return e.policy, e.err
	}
	// Compiled unlocked: two readers of a new version may both compile it
	// (the last one is kept); neither waits for the other's compilation.
	p, err := Read(gvr, u)
	c.compiles.Add(1)
	c.mu.Lock()
	c.byKey[key] = entry{gvr: gvr, resourceVersion: rv, policy: p, err: err}
	c.mu.Unlock()
	return p, err
}

// Forget drops a deleted policy.
func (c *Catalog) Forget(gvr schema.GroupVersionResource, namespace, name string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.byKey, gvr.String()+"|"+namespace+"/"+name)
	c.mu.Unlock()
}

// Retain drops the policies of a kind that a complete list of it does not
// hold.
func (c *Catalog) Retain(gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	if c == nil {
		return
	}
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[gvr.String()+"|"+u.GetNamespace()+"/"+u.GetName()] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, e := range c.byKey {
		if e.gvr == gvr && !present[key] {
			delete(c.byKey, key)
		}
	}
}

// Len is the number of policies remembered.
func (c *Catalog) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey)
}

// Compiles is the number of policy versions compiled.
func (c *Catalog) Compiles() int64 {
	if c == nil {
		return 0
	}
	return c.compiles.Load()
}
