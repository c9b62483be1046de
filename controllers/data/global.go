package data

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2alpha1 "github.com/tally-dev/tally/api/kyverno/v2alpha1"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/internal/tenant"
)

// DefaultRefreshInterval is how often a GlobalContextEntry's apiCall is
// made when the entry does not say.
const DefaultRefreshInterval = 10 * time.Minute

// gceVersions are the kyverno.io versions GlobalContextEntries may be
// served in, preferred first.
var gceVersions = []string{"v2beta1", "v2alpha1"}

// globalContext keeps the GlobalContextEntries current, started when a
// policy first reads one: each entry's data (a kubernetesResource's
// objects, kept by a watch; an apiCall's answer, refreshed on its interval)
// and the policies that read it, rescanned when it changes.
type globalContext struct {
	l *Loader

	mu      sync.Mutex
	started bool
	listed  chan struct{}
	done    bool
	err     error // the entries cannot be watched (not served)
	entries map[string]*globalEntry
	readers map[string]map[string]bool // entry name -> policies
}

// LabelTenantReadable marks the GlobalContextEntries that namespaced
// policies may read (value "true"); the others are the platform's only.
const LabelTenantReadable = "tally.dev/tenant-readable"

// globalEntry is one GlobalContextEntry's data.
type globalEntry struct {
	name string
	spec kyvernov2alpha1.GlobalContextEntrySpec
	// tenants: LabelTenantReadable is "true".
	tenants bool
	cancel  context.CancelFunc

	mu     sync.Mutex
	ready  chan struct{} // closed once loaded (or listed) the first time
	loaded bool
	data   any
	err    error
	objs   map[string]map[string]any // kubernetesResource: by namespace/name
	listed bool                      // kubernetesResource: the first list arrived
}

// Global serves a globalReference entry and CEL's globalContext.Get: the
// named entry's data, or one of its projections (projection "" is the
// data). It waits for the entry's first load, as long as ctx allows.
func (l *Loader) Global(ctx context.Context, policy, name, projection string) (any, error) {
	g := l.global
	if err := g.start(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.readers[name] == nil {
		g.readers[name] = map[string]bool{}
	}
	g.readers[name][policy] = true
	listed := g.listed
	g.mu.Unlock()
	select {
	case <-listed:
	case <-ctx.Done():
		return nil, fmt.Errorf("global context entry %s: GlobalContextEntries not listed yet: %w", name, ctx.Err())
	}
	g.mu.Lock()
	e, ok := g.entries[name]
	err := g.err
	forTenants := ok && e.tenants
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("global context entry %s not found", name)
	}
	if ns := tenant.Of(ctx); ns != "" && !forTenants {
		return nil, fmt.Errorf("global context entry %s is not for namespaced policies (a policy of namespace %s): the platform lets them read an entry with the label %s=true", name, ns, LabelTenantReadable)
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("global context entry %s: not loaded yet: %w", name, ctx.Err())
	}
	e.mu.Lock()
	data, derr := e.data, e.err
	e.mu.Unlock()
	if derr != nil {
		return nil, fmt.Errorf("global context entry %s: %w", name, derr)
	}
	if projection == "" {
		return data, nil
	}
	for _, p := range e.spec.Projections {
		if p.Name == projection {
			v, err := variables.Query(p.JMESPath, data)
			if err != nil {
				return nil, fmt.Errorf("global context entry %s, projection %s: %w", name, projection, err)
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("global context entry %s has no projection %s", name, projection)
}

// globalReference evaluates a globalReference context entry.
func (l *Loader) globalReference(ctx context.Context, policy string, ref *kyvernov1.GlobalContextEntryReference, data map[string]any) (any, error) {
	name, err := variables.SubstituteString(ref.Name, data)
	if err != nil {
		return nil, fmt.Errorf("globalReference.name: %w", err)
	}
	v, err := l.Global(ctx, policy, name, "")
	if err != nil || ref.JMESPath == "" {
		return v, err
	}
	expr, err := variables.SubstituteString(ref.JMESPath, data)
	if err != nil {
		return nil, fmt.Errorf("globalReference.jmesPath: %w", err)
	}
	return variables.Query(expr, v)
}

// start begins watching the GlobalContextEntries, once.
func (g *globalContext) start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return nil
	}
	ctx := g.l.context()
	if ctx == nil {
		return fmt.Errorf("the data loader is not running")
	}
	g.started = true
	gvr, err := g.served()
	if err != nil {
		g.err = err
		g.markListed()
		return nil
	}
	g.l.requests.WithLabelValues("list-globalcontextentries").Inc()
	g.l.track(watch.Start(ctx, g.l.client, gvr, &gceSink{g: g}))
	return nil
}

// served finds the version GlobalContextEntries are served in.
func (g *globalContext) served() (schema.GroupVersionResource, error) {
	disc := discovery.NewDiscoveryClient(g.l.rest)
	for _, v := range gceVersions {
		list, err := disc.ServerResourcesForGroupVersion("kyverno.io/" + v)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if r.Name == "globalcontextentries" {
				return schema.GroupVersionResource{Group: "kyverno.io", Version: v, Resource: r.Name}, nil
			}
		}
	}
	return schema.GroupVersionResource{}, fmt.Errorf("GlobalContextEntries are not served by the API server (kyverno.io %v): install their CRD", gceVersions)
}

func (g *globalContext) markListed() {
	if !g.done {
		g.done = true
		close(g.listed)
	}
}

// changed tells OnChange the policies that read an entry.
func (g *globalContext) changed(name string) {
	g.mu.Lock()
	policies := slices.Sorted(maps.Keys(g.readers[name]))
	g.mu.Unlock()
	if len(policies) > 0 && g.l.opts.OnChange != nil {
		g.l.opts.OnChange(policies)
	}
}

// gceSink receives the GlobalContextEntries.
type gceSink struct{ g *globalContext }

func (s *gceSink) Upsert(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	var spec kyvernov2alpha1.GlobalContextEntrySpec
	raw, _ := u.Object["spec"].(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		spec = kyvernov2alpha1.GlobalContextEntrySpec{}
	}
	tenants := u.GetLabels()[LabelTenantReadable] == "true"
	g := s.g
	g.mu.Lock()
	old := g.entries[u.GetName()]
	if old != nil && old.tenants != tenants && jsonEqual(old.spec, spec) {
		old.tenants = tenants // read under g.mu
		g.mu.Unlock()
		g.changed(old.name)
		return
	}
	if old != nil && jsonEqual(old.spec, spec) {
		g.mu.Unlock()
		return
	}
	e := &globalEntry{name: u.GetName(), spec: spec, tenants: tenants, ready: make(chan struct{}), objs: map[string]map[string]any{}}
	g.entries[e.name] = e
	g.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	g.run(e)
	if old != nil {
		g.changed(e.name)
	}
}

func (s *gceSink) Remove(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	g := s.g
	g.mu.Lock()
	old := g.entries[u.GetName()]
	delete(g.entries, u.GetName())
	g.mu.Unlock()
	if old != nil {
		old.cancel()
		g.changed(old.name)
	}
}

func (s *gceSink) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	present := map[string]bool{}
	for _, u := range objs {
		present[u.GetName()] = true
		s.Upsert(ctx, gvr, u)
	}
	g := s.g
	g.mu.Lock()
	var gone []*globalEntry
	for name, e := range g.entries {
		if !present[name] {
			gone = append(gone, e)
			delete(g.entries, name)
		}
	}
	g.mu.Unlock()
	for _, e := range gone {
		e.cancel()
		g.changed(e.name)
	}
}

func (s *gceSink) Listed(context.Context, schema.GroupVersionResource) {
	s.g.mu.Lock()
	s.g.markListed()
	s.g.mu.Unlock()
}

// run starts keeping an entry's data current, until the entry changes or
// goes.
func (g *globalContext) run(e *globalEntry) {
	ctx, cancel := context.WithCancel(g.l.context())
	e.cancel = cancel
	switch {
	case e.spec.KubernetesResource != nil:
		kr := e.spec.KubernetesResource
		gvr := schema.GroupVersionResource{Group: kr.Group, Version: kr.Version, Resource: kr.Resource}
		g.l.track(watch.Start(ctx, g.l.client, gvr, &entrySink{g: g, e: e}))
	case e.spec.APICall != nil:
		g.l.wg.Add(1)
		go func() {
			defer g.l.wg.Done()
			g.poll(ctx, e)
		}()
	default:
		e.set(nil, fmt.Errorf("neither kubernetesResource nor apiCall is set"))
	}
}

// poll makes an entry's apiCall on its refresh interval, retrying a
// failed call up to its retry limit.
func (g *globalContext) poll(ctx context.Context, e *globalEntry) {
	call := e.spec.APICall
	every := DefaultRefreshInterval
	if call.RefreshInterval != nil && call.RefreshInterval.Duration > 0 {
		every = call.RefreshInterval.Duration
	}
	retries := call.RetryLimit
	if retries <= 0 {
		retries = 3
	}
	entry := &kyvernov1.ContextAPICall{URLPath: call.URLPath, Method: call.Method, Data: call.Data, Service: call.Service}
	for {
		var v any
		var err error
		for attempt := 0; attempt <= retries; attempt++ {
			g.l.requests.WithLabelValues("global-context").Inc()
			if entry.Service != nil {
				v, err = g.l.serviceCall(ctx, entry, map[string]any{})
			} else {
				v, err = apiCall(entry, map[string]any{}, func(method, path string, body []byte) (any, error) {
					p, err := engine.ParseAPIPath(path)
					if err != nil {
						return nil, err
					}
					return g.l.fetch(ctx, &Clients{Dynamic: g.l.client, REST: g.l.rest}, method, p, body)
				})
			}
			if err == nil || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-g.l.opts.Clock.After(time.Duration(attempt+1) * time.Second):
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "global context entry refresh failed", "entry", e.name)
		}
		if e.set(v, err) {
			g.changed(e.name)
		}
		select {
		case <-ctx.Done():
			return
		case <-g.l.opts.Clock.After(every):
		}
	}
}

// set records an entry's data; it reports whether it changed after the
// first load.
func (e *globalEntry) set(v any, err error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	first := !e.loaded
	changed := !first && (fmt.Sprint(e.err) != fmt.Sprint(err) || !jsonEqual(e.data, v))
	e.data, e.err = v, err
	if first {
		e.loaded = true
		close(e.ready)
	}
	return changed
}

// jsonEqual compares two values as JSON (specs, API answers).
func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// entrySink keeps a kubernetesResource entry's objects.
type entrySink struct {
	g *globalContext
	e *globalEntry
}

func (s *entrySink) wanted(u *unstructured.Unstructured) bool {
	ns := s.e.spec.KubernetesResource.Namespace
	return ns == "" || u.GetNamespace() == ns
}

func (s *entrySink) Upsert(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	if !s.wanted(u) {
		return
	}
	obj := stripped(u)
	s.update(func(objs map[string]map[string]any) { objs[u.GetNamespace()+"/"+u.GetName()] = obj })
}

// stripped is an object as policies read it: without managedFields.
func stripped(u *unstructured.Unstructured) map[string]any {
	obj := u.Object
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	return obj
}

func (s *entrySink) Remove(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	s.update(func(objs map[string]map[string]any) { delete(objs, u.GetNamespace()+"/"+u.GetName()) })
}

func (s *entrySink) Replace(_ context.Context, _ schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	s.update(func(all map[string]map[string]any) {
		clear(all)
		for _, u := range objs {
			if s.wanted(u) {
				all[u.GetNamespace()+"/"+u.GetName()] = stripped(u)
			}
		}
	})
}

func (s *entrySink) Listed(context.Context, schema.GroupVersionResource) {
	s.update(func(map[string]map[string]any) { s.e.listed = true })
}

// update changes the objects and publishes them as the entry's data (a
// list, by namespace and name) once the resource was listed.
func (s *entrySink) update(change func(map[string]map[string]any)) {
	e := s.e
	e.mu.Lock()
	change(e.objs)
	if !e.listed {
		e.mu.Unlock()
		return // published once the whole list arrived
	}
	keys := slices.Collect(maps.Keys(e.objs))
	sort.Strings(keys)
	list := make([]any, len(keys))
	for i, k := range keys {
		list[i] = e.objs[k]
	}
	e.mu.Unlock()
	if e.set(list, nil) {
		s.g.changed(e.name)
	}
}
