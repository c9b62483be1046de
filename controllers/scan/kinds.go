package scan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/match"
)

// kindWatch is the kinds the scanner watches: the policy kinds (always),
// and each kind some policy needs, started with its first user and stopped
// with its last. It resolves policies' kinds and resources through
// discovery, and knows which kind a GVR serves and whether each watch
// listed its kind once.
type kindWatch struct {
	client dynamic.Interface
	disc   discovery.DiscoveryInterface
	sink   namespacedSink
	// owns, when set, is the shard of this replica: a namespaced kind is
	// then watched in each owned namespace (the API server filters), and a
	// cluster-scoped one only by the owner of "" (shard.Assignment.Owns).
	owns func(namespace string) bool

	mu sync.Mutex
	// ctx is Run's: the watches of a namespace that appears are started
	// from the namespace watch's event, and must outlive that watch (it is
	// restarted when the namespaces are needed as resources).
	ctx     context.Context
	sources map[sourceKey]*watch.Source
	synced  map[sourceKey]bool
	// owned are the owned namespaces seen (sharded only); namespaced the
	// kinds known to be namespaced (discovery).
	owned      map[string]bool
	namespaced map[schema.GroupVersionResource]bool
	users      map[schema.GroupVersionResource]map[string]bool // policies that need a kind
	// forbidden are the kinds the service account may not list, with the
	// reason, as last probed (when a kind gained its first user).
	forbidden map[schema.GroupVersionResource]error
	// policySources are the kinds listed before any resource is evaluated:
	// namespaces, policies and exceptions.
	policySources []schema.GroupVersionResource
	kindOf        map[schema.GroupVersionResource]string
	gvrOf         map[string]schema.GroupVersionResource
}

// sourceKey names a watch: a kind, in one namespace or all ("").
type sourceKey struct {
	gvr schema.GroupVersionResource
	ns  string
}

// namespacedSink is the sink of the scanner's watches (its handlers): a
// watch of one namespace replaces and lists that namespace only.
type namespacedSink interface {
	watch.StreamingSink
	replaceIn(ctx context.Context, gvr schema.GroupVersionResource, namespace string, objs []*unstructured.Unstructured)
	listedIn(gvr schema.GroupVersionResource, namespace string)
}

// inNamespace is the sink of a watch of one namespace.
type inNamespace struct {
	namespacedSink
	ns string
}

func (n inNamespace) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	n.replaceIn(ctx, gvr, n.ns, objs)
}

func (n inNamespace) Listed(_ context.Context, gvr schema.GroupVersionResource) {
	n.listedIn(gvr, n.ns)
}

func newKindWatch(client dynamic.Interface, disc discovery.DiscoveryInterface, sink namespacedSink, owns func(namespace string) bool) *kindWatch {
	return &kindWatch{client: client, disc: disc, sink: sink, owns: owns,
		sources:    map[sourceKey]*watch.Source{},
		synced:     map[sourceKey]bool{},
		owned:      map[string]bool{},
		namespaced: map[schema.GroupVersionResource]bool{},
		users:      map[schema.GroupVersionResource]map[string]bool{},
		forbidden:  map[schema.GroupVersionResource]error{},
		kindOf:     map[schema.GroupVersionResource]string{},
		gvrOf:      map[string]schema.GroupVersionResource{},
	}
}

// start watches the policy kinds; until each listed once, no resource is
// evaluated (policiesListed).
func (k *kindWatch) start(ctx context.Context, policySources []schema.GroupVersionResource) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ctx = ctx
	k.policySources = policySources
	for _, gvr := range policySources {
		k.sources[sourceKey{gvr: gvr}] = watch.Start(ctx, k.client, gvr, k.sink)
	}
}

// startLocked starts the watch of key (replacing one running), and returns
// the one replaced to be stopped. The caller holds k.mu.
func (k *kindWatch) startLocked(ctx context.Context, key sourceKey) *watch.Source {
	var sink watch.Sink = k.sink
	if key.ns != "" {
		sink = inNamespace{namespacedSink: k.sink, ns: key.ns}
	}
	old := k.sources[key]
	k.sources[key] = watch.StartIn(ctx, k.client, key.gvr, key.ns, sink)
	delete(k.synced, key)
	return old
}

// keysFor are the watches a needed kind runs: one of every namespace,
// unless sharded, where a namespaced kind is watched in each owned
// namespace and a cluster-scoped one only by the owner of "". The caller
// holds k.mu.
func (k *kindWatch) keysFor(gvr schema.GroupVersionResource, namespaced bool) []sourceKey {
	if k.owns == nil || gvr == apiresources.Namespace {
		return []sourceKey{{gvr: gvr}}
	}
	if !namespaced {
		if k.owns("") {
			return []sourceKey{{gvr: gvr}}
		}
		return nil
	}
	keys := make([]sourceKey, 0, len(k.owned))
	for ns := range k.owned {
		keys = append(keys, sourceKey{gvr: gvr, ns: ns})
	}
	return keys
}

// isNamespaced tells whether a kind's objects live in namespaces (from
// discovery; a kind discovery cannot tell of is watched in every namespace,
// and its objects outside the shard are dropped by the scanner).
func (k *kindWatch) isNamespaced(gvr schema.GroupVersionResource) (namespaced, known bool) {
	k.mu.Lock()
	n, ok := k.namespaced[gvr]
	k.mu.Unlock()
	if ok {
		return n, true
	}
	list, err := k.disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil || list == nil {
		return false, false
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			k.mu.Lock()
			k.namespaced[gvr] = r.Namespaced
			k.mu.Unlock()
			return r.Namespaced, true
		}
	}
	return false, false
}

// namespaceSeen starts the watches of an owned namespace that appeared
// (sharded only).
func (k *kindWatch) namespaceSeen(name string) {
	if k.owns == nil || !k.owns(name) {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.owned[name] || k.ctx == nil {
		return
	}
	k.owned[name] = true
	for gvr := range k.users {
		if k.forbidden[gvr] != nil || gvr == apiresources.Namespace || !k.namespaced[gvr] {
			continue // not listable, or watched across namespaces
		}
		k.startLocked(k.ctx, sourceKey{gvr: gvr, ns: name})
	}
}

// namespaceGone stops the watches of a namespace deleted (its objects were
// deleted before it).
func (k *kindWatch) namespaceGone(name string) {
	k.mu.Lock()
	if !k.owned[name] {
		k.mu.Unlock()
		return
	}
	delete(k.owned, name)
	k.mu.Unlock()
	k.stopWhere(func(key sourceKey) bool { return key.ns == name })
}

// stopWhere stops the watches whose key matches, and waits for them.
func (k *kindWatch) stopWhere(match func(sourceKey) bool) {
	k.mu.Lock()
	var stop []*watch.Source
	for key, src := range k.sources {
		if match(key) {
			stop = append(stop, src)
			delete(k.sources, key)
			delete(k.synced, key)
		}
	}
	k.mu.Unlock()
	for _, src := range stop {
		src.Stop()
	}
}

// stop stops every watch and waits for them.
func (k *kindWatch) stop() {
	k.mu.Lock()
	srcs := make([]*watch.Source, 0, len(k.sources))
	for _, src := range k.sources {
		src.Cancel()
		srcs = append(srcs, src)
	}
	k.mu.Unlock()
	for _, src := range srcs {
		<-src.Done()
	}
}

// celPolicyKinds are the CEL policy kinds the scanner watches where
// served: Kyverno's (tally's CRDs, or Kyverno's beside it), the
// ValidatingAdmissionPolicies and, when reported, the
// MutatingAdmissionPolicies.
func celPolicyKinds(mutatingAdmissionPolicies bool) []schema.GroupVersionResource {
	out := slices.Clone(celPolicyGVRs)
	for _, k := range catalog.Kinds(catalog.AdmissionPolicy) {
		if k.ReportsFlag == "" || mutatingAdmissionPolicies {
			out = append(out, admissionPolicyGVRs(k)...)
		}
	}
	return out
}

// addPolicySource watches a policy kind served after the start (its CRD
// established later): listed like those of the start, before its
// policies count as known.
func (k *kindWatch) addPolicySource(gvr schema.GroupVersionResource) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctx == nil || k.ctx.Err() != nil {
		return // stopping
	}
	key := sourceKey{gvr: gvr}
	if _, ok := k.sources[key]; ok {
		return
	}
	k.policySources = append(slices.Clone(k.policySources), gvr)
	k.sources[key] = watch.Start(k.ctx, k.client, gvr, k.sink)
}

// resolveKinds maps match kinds to the GVRs to list: every group that serves
// the kind when no group is given, its preferred version. Wildcard kinds and
// subresources are not scanned in the background.
func (k *kindWatch) resolveKinds(kinds []string) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	var errs []error
	for _, kind := range kinds {
		ref, err := match.ParseKind(kind)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ref.Subresource != "" {
			continue // subresources exist only at admission
		}
		if strings.ContainsAny(ref.Kind, "*?") {
			errs = append(errs, fmt.Errorf("kind %q: wildcard kinds are not scanned in the background", kind))
			continue
		}
		gvrs, err := k.lookupKind(ref)
		if err != nil {
			errs = append(errs, fmt.Errorf("kind %q: %w", kind, err))
			continue
		}
		out = append(out, gvrs...)
	}
	return out, errors.Join(errs...)
}

func (k *kindWatch) lookupKind(ref match.KindSelector) ([]schema.GroupVersionResource, error) {
	for attempt := 0; attempt < 2; attempt++ {
		lists, err := k.disc.ServerPreferredResources()
		if err != nil && len(lists) == 0 {
			return nil, fmt.Errorf("discovery: %w", err)
		}
		var out []schema.GroupVersionResource
		for _, list := range lists {
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				continue
			}
			if (ref.Group != "*" && gv.Group != ref.Group) || (ref.Version != "*" && gv.Version != ref.Version) {
				continue
			}
			for _, r := range list.APIResources {
				if r.Kind == ref.Kind && !strings.Contains(r.Name, "/") && hasVerbs(r, "list", "watch") {
					out = append(out, gv.WithResource(r.Name))
				}
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		if c, ok := k.disc.(discovery.CachedDiscoveryInterface); ok && attempt == 0 {
			c.Invalidate() // a CRD may have appeared since discovery was cached
			continue
		}
		break
	}
	return nil, fmt.Errorf("not served by the API server")
}

// resolveResources maps the resource rules of a CEL policy to the GVRs to
// list: the preferred version of each group that serves a listed resource.
// Wildcard resources are not scanned in the background, as wildcard kinds
// are not.
func (k *kindWatch) resolveResources(rules []engine.ResourceRule) ([]schema.GroupVersionResource, error) {
	lists, err := k.disc.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var out []schema.GroupVersionResource
	var errs []error
	for _, r := range rules {
		for _, res := range r.Resources {
			found := false
			if strings.Contains(res, "*") {
				errs = append(errs, fmt.Errorf("resource %q: wildcard resources are not scanned in the background", res))
				continue
			}
			if strings.Contains(res, "/") {
				continue // subresources exist only at admission
			}
			for _, list := range lists {
				gv, err := schema.ParseGroupVersion(list.GroupVersion)
				if err != nil || !listed(r.Groups, gv.Group) || !listed(r.Versions, gv.Version) {
					continue
				}
				for _, api := range list.APIResources {
					if api.Name == res && hasVerbs(api, "list", "watch") {
						gvr := gv.WithResource(api.Name)
						if !slices.Contains(out, gvr) {
							out = append(out, gvr)
						}
						found = true
					}
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("resource %q of groups %v, versions %v: not served by the API server", res, r.Groups, r.Versions))
			}
		}
	}
	return out, errors.Join(errs...)
}

// gvrOfKind returns the preferred GVR serving a group and kind (for a
// ValidatingAdmissionPolicy's paramKind).
func (k *kindWatch) gvrOfKind(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	gvrs, err := k.lookupKind(match.KindSelector{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind})
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("%s: %w", gvk.String(), err)
	}
	return gvrs[0], nil
}

func listed(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, "*")
}

func hasVerbs(r metav1.APIResource, verbs ...string) bool {
	for _, v := range verbs {
		if !slices.Contains(r.Verbs, v) {
			return false
		}
	}
	return true
}

// need records that a policy needs exactly gvrs. Kinds that gain their
// first user are started, unless the service account may not list them
// (refused, with the reason); kinds that lose their last are stopped and
// returned, for their stored objects to be forgotten.
func (k *kindWatch) need(ctx context.Context, policy string, gvrs []schema.GroupVersionResource) (refused map[schema.GroupVersionResource]error, stopped []schema.GroupVersionResource) {
	want := map[schema.GroupVersionResource]bool{}
	for _, g := range gvrs {
		want[g] = true
	}
	k.mu.Lock()
	var start []schema.GroupVersionResource
	for g, users := range k.users {
		if users[policy] && !want[g] {
			delete(users, policy)
			if len(users) == 0 {
				delete(k.users, g)
				stopped = append(stopped, g)
			}
		}
	}
	for g := range want {
		users := k.users[g]
		if users == nil {
			users = map[string]bool{}
			k.users[g] = users
			start = append(start, g)
		}
		users[policy] = true
	}
	k.mu.Unlock()

	for _, g := range start {
		if g != apiresources.Namespace {
			err := k.canList(ctx, g)
			k.mu.Lock()
			if err != nil {
				k.forbidden[g] = err
			} else {
				delete(k.forbidden, g)
			}
			k.mu.Unlock()
			if err != nil {
				if refused == nil {
					refused = map[schema.GroupVersionResource]error{}
				}
				refused[g] = err
				continue
			}
		}
		// The namespace watch always runs, for labels; its objects are
		// stored as resources only while a policy needs them, so it is
		// restarted to list them again.
		namespaced, known := k.isNamespaced(g)
		k.mu.Lock()
		keys := []sourceKey{{gvr: g}}
		if known {
			keys = k.keysFor(g, namespaced)
		}
		var old []*watch.Source
		for _, key := range keys {
			if src := k.startLocked(ctx, key); src != nil {
				old = append(old, src)
			}
		}
		k.mu.Unlock()
		for _, src := range old {
			src.Stop()
		}
	}
	for _, g := range stopped {
		if g == apiresources.Namespace {
			continue // the namespace watch stays: labels are always needed
		}
		k.stopWhere(func(key sourceKey) bool { return key.gvr == g })
	}
	return refused, stopped
}

// forbiddenOf is why the service account may not list some of gvrs (nil
// when it may list them all, as far as the last probes tell).
func (k *kindWatch) forbiddenOf(gvrs []schema.GroupVersionResource) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	for _, g := range gvrs {
		if err := k.forbidden[g]; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// canList probes a kind with a one-item LIST, so that a kind the service
// account may not read is reported instead of retried forever.
func (k *kindWatch) canList(ctx context.Context, gvr schema.GroupVersionResource) error {
	_, err := k.client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("forbidden: grant get, list and watch on %s to tally's service account: %w", gvr.String(), err)
	}
	return nil // other errors are transient: the reflector retries them with backoff
}

// needed reports whether some policy needs a kind.
func (k *kindWatch) needed(gvr schema.GroupVersionResource) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.users[gvr]) > 0
}

// remember records the group and kind a GVR serves, learnt from its objects.
func (k *kindWatch) remember(gvr schema.GroupVersionResource, group, kind string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.kindOf[gvr]; !ok {
		k.kindOf[gvr] = kind
		k.gvrOf[group+"/"+kind] = gvr
	}
}

func (k *kindWatch) groupKind(gvr schema.GroupVersionResource) (group, kind string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return gvr.Group, k.kindOf[gvr]
}

func (k *kindWatch) gvrFor(group, kind string) schema.GroupVersionResource {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.gvrOf[group+"/"+kind]
}

// listed records that a kind's watch (of one namespace, or all: "")
// delivered its first complete list, and reports whether every running
// watch has.
func (k *kindWatch) listed(gvr schema.GroupVersionResource, namespace string) (all bool) {
	k.mu.Lock()
	key := sourceKey{gvr: gvr, ns: namespace}
	if _, running := k.sources[key]; running || namespace == "" {
		k.synced[key] = true
	}
	k.mu.Unlock()
	return k.listedAll()
}

// ownedNamespaces counts the namespaces of the shard (sharded only).
func (k *kindWatch) ownedNamespaces() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.owned)
}

// listedAll reports whether every running watch has listed its kind once.
func (k *kindWatch) listedAll() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key := range k.sources {
		if !k.synced[key] {
			return false
		}
	}
	return len(k.sources) > 0
}

// policiesListed reports whether the policies, exceptions and namespaces
// were listed once.
func (k *kindWatch) policiesListed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	sources := k.policySources
	if len(sources) == 0 {
		sources = classicPolicySources // not started (tests drive the scanner without Run)
	}
	for _, gvr := range sources {
		if !k.synced[sourceKey{gvr: gvr}] {
			return false
		}
	}
	return true
}

// servedUnevaluatedKinds are the unevaluated kinds discovery serves, each
// in its newest served version.
func (k *kindWatch) servedUnevaluatedKinds() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	lists := map[string]*metav1.APIResourceList{} // by group version, asked once
	for _, p := range catalog.Kinds(catalog.KyvernoOnly) {
		for _, v := range p.Versions {
			gv := schema.GroupVersion{Group: p.GVR.Group, Version: v}
			list, asked := lists[gv.String()]
			if !asked {
				list, _ = k.disc.ServerResourcesForGroupVersion(gv.String())
				lists[gv.String()] = list
			}
			if list != nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == p.GVR.Resource }) {
				out = append(out, gv.WithResource(p.GVR.Resource))
				break
			}
		}
	}
	return out
}

// celPolicyGVRs are the CEL kinds, in the order they are watched.
var celPolicyGVRs = append([]schema.GroupVersionResource{apiresources.CELPolicyException}, catalog.GVRs(nil, catalog.CEL)...)

// classicPolicySources are the kinds always listed before any resource is
// evaluated.
var classicPolicySources = append([]schema.GroupVersionResource{apiresources.Namespace, apiresources.PolicyException}, catalog.GVRs(nil, catalog.Classic)...)
