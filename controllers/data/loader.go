// Package data loads the cluster data that policies read: the configMap
// and apiCall context entries of classic rules (engine.ContextLoader), for
// the scanner and the admission bridge alike.
//
// ConfigMaps are served from one watch of every ConfigMap, started when a
// policy first reads one (a GET per evaluation would cost the API server one
// request per resource scanned). apiCall answers are reused while they keep
// being read (CallTTL after the last read, CallMaxAge at most), so that a
// scan pass over many resources makes one request per distinct call, not
// one per resource. The loader records which policy read which
// ConfigMap and tells OnChange when one of them changes (R40): the scanner
// rescans those policies' resources only. Data that cannot be read (a
// missing ConfigMap, a failing call) is an error naming it, never an empty
// value (R39).
package data

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apipath "k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/internal/tenant"
)

// DefaultCallTTL is how long an answer is reused after it was last read,
// by default; DefaultCallMaxAge bounds how old a reused answer may be.
// A scan pass reads the same URL over and over, each read extending the
// answer's life: a pass of up to DefaultCallMaxAge makes one request per
// distinct call, and data no longer read is read anew after the TTL.
const (
	DefaultCallTTL    = 30 * time.Second
	DefaultCallMaxAge = 5 * time.Minute
)

// ReadTimeout bounds one read of the cluster or a service;
// DefaultTenantReadTimeout one of a namespaced policy's.
const (
	ReadTimeout              = 30 * time.Second
	DefaultTenantReadTimeout = 3 * time.Second
)

// Options configure a Loader.
type Options struct {
	// OnChange is told the policies (by key) that read a ConfigMap that
	// was created, changed or deleted.
	OnChange func(policies []string)
	// OnForbidden is told when a policy's data read is refused by RBAC
	// (what tally's service account may not read): the scanner records it
	// as an Event on the policy. Called at most once per policy and call
	// per CallTTL (answers are reused).
	OnForbidden func(policy string, err error)
	// HTTP says which services policies may call, and for how long.
	HTTP HTTPOptions
	// Images says whether policies may read image registries.
	Images RegistryOptions
	// CallTTL is how long an answer is reused after its last read
	// (DefaultCallTTL); CallMaxAge how old it may get (DefaultCallMaxAge).
	CallTTL    time.Duration
	CallMaxAge time.Duration
	Clock      clock.Clock
	Registry   prometheus.Registerer
	// Tenants gives the clients of namespaced policies' reads (R47):
	// their namespace's identity. Nil: such reads are errors.
	Tenants Tenants
	// TenantReadTimeout bounds one cluster read of a namespaced policy
	// (DefaultTenantReadTimeout): a tenant's slow read holds a scan
	// worker for no longer (ReadTimeout bounds the platform's).
	TenantReadTimeout time.Duration
}

// Loader implements engine.ContextLoader against the API server.
type Loader struct {
	client dynamic.Interface
	rest   rest.Interface
	opts   Options

	requests *prometheus.CounterVec
	http     *httpClients
	reg      *registry
	global   *globalContext

	// wg counts the goroutines of the GlobalContextEntries (track).
	wg sync.WaitGroup
	mu sync.Mutex
	// ctx is Run's: the ConfigMap and GlobalContextEntry watches start on
	// the first load that needs them, inside an evaluation whose context
	// ends with it, and must run until Run ends. Nil before Run.
	ctx      context.Context
	source   *watch.Source
	listed   chan struct{}
	isListed bool
	cms      map[string]map[string]any // "namespace/name" -> {data, metadata}
	readers  map[string]map[string]bool
	calls    map[string]*callEntry
	// flight makes concurrent reads of one key one request.
	flight singleflight.Group
}

type callEntry struct {
	at, used time.Time
	value    any
	err      error
}

// fresh reports whether an answer may still be reused at now.
func (l *Loader) fresh(e *callEntry, now time.Time) bool {
	return now.Sub(e.used) < l.opts.CallTTL && now.Sub(e.at) < l.opts.CallMaxAge
}

var (
	_ engine.ContextLoader = (*Loader)(nil)
	_ watch.StreamingSink  = (*Loader)(nil)
)

// StreamsLists: listed ConfigMaps arrive one by one through Upsert
// (watch.StreamingSink); Replace receives stubs.
func (l *Loader) StreamsLists() {}

// New builds a Loader; raw serves apiCall URL paths (any REST client of the
// cluster: its paths are absolute).
func New(client dynamic.Interface, raw rest.Interface, opts Options) *Loader {
	if opts.CallTTL <= 0 {
		opts.CallTTL = DefaultCallTTL
	}
	if opts.CallMaxAge < opts.CallTTL {
		opts.CallMaxAge = max(DefaultCallMaxAge, opts.CallTTL)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.HTTP.Timeout <= 0 {
		opts.HTTP.Timeout = DefaultHTTPTimeout
	}
	if opts.TenantReadTimeout <= 0 {
		opts.TenantReadTimeout = DefaultTenantReadTimeout
	}
	l := &Loader{client: client, rest: raw, opts: opts, listed: make(chan struct{}), http: &httpClients{timeout: opts.HTTP.Timeout}, reg: &registry{},
		cms: map[string]map[string]any{}, readers: map[string]map[string]bool{}, calls: map[string]*callEntry{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_data_requests_total",
			Help: "Requests for data policies read: kind is list-configmaps (the ConfigMap watch's lists), api-call, resource (the resource library of CEL policies), http (calls to services: apiCall.service, CEL's http library), or registry (image references resolved: imageRegistry entries, CEL's image.GetMetadata).",
		}, []string{"kind"}),
	}
	l.global = &globalContext{l: l, listed: make(chan struct{}), entries: map[string]*globalEntry{}, readers: map[string]map[string]bool{}}
	if opts.Registry != nil {
		opts.Registry.MustRegister(l.requests)
	}
	return l
}

// Run serves loads until ctx ends (before Run, loads fail: no context).
func (l *Loader) Run(ctx context.Context) error {
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	src := l.source
	l.mu.Unlock()
	if src != nil {
		<-src.Done()
	}
	l.wg.Wait() // the GlobalContextEntry watches and polls
	return nil
}

// track counts a watch started for the GlobalContextEntries until it ends
// (with Run's context): Run waits for it.
func (l *Loader) track(src *watch.Source) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		<-src.Done()
	}()
}

// Load implements engine.ContextLoader.
func (l *Loader) Load(ctx context.Context, policy string, entry kyvernov1.ContextEntry, data map[string]any) (any, error) {
	switch {
	case entry.ConfigMap != nil:
		return l.configMap(ctx, policy, entry, data)
	case entry.APICall != nil && entry.APICall.Service != nil:
		return l.serviceCall(ctx, entry.APICall, data)
	case entry.APICall != nil:
		return l.apiCall(ctx, policy, entry.APICall, data)
	case entry.GlobalReference != nil:
		return l.globalReference(ctx, policy, entry.GlobalReference, data)
	case entry.ImageRegistry != nil:
		return l.imageRegistry(ctx, entry.ImageRegistry, data)
	}
	return nil, fmt.Errorf("unknown context entry type")
}

// configMap serves a configMap entry from the watch's cache: the
// ConfigMap's data and metadata, as Kyverno gives them. A namespaced
// policy's is read with its namespace's identity instead (a GET, reused
// for CallTTL and read again when the watch sees it change): RBAC says
// whether it may.
func (l *Loader) configMap(ctx context.Context, policy string, entry kyvernov1.ContextEntry, data map[string]any) (any, error) {
	namespace, name, err := engine.ConfigMapOf(entry.ConfigMap, data)
	if err != nil {
		return nil, err
	}
	key := namespace + "/" + name
	listed, err := l.watchConfigMaps(policy, key)
	if err != nil {
		return nil, err
	}
	if tenant.Of(ctx) != "" {
		return l.tenantConfigMap(ctx, namespace, name)
	}
	select {
	case <-listed:
	case <-ctx.Done():
		return nil, fmt.Errorf("configmap %s: ConfigMaps not listed yet: %w", key, ctx.Err())
	}
	l.mu.Lock()
	cm, ok := l.cms[key]
	l.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("configmap %s not found", key)
	}
	return cm, nil
}

// tenantConfigMap reads a ConfigMap with the identity of ctx's tenant.
func (l *Loader) tenantConfigMap(ctx context.Context, namespace, name string) (any, error) {
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("configMap namespace %q: %s (no call made)", namespace, msgs[0])
	}
	if msgs := apipath.IsValidPathSegmentName(name); name == "" || len(msgs) > 0 {
		return nil, fmt.Errorf("configMap name %q is not a name (no call made)", name)
	}
	c, as, err := l.clientsFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("configmap %s/%s: %w", namespace, name, err)
	}
	v, err := l.cached(ctx, configMapKey(namespace+"/"+name)+as, "configmap", func(ctx context.Context) (any, error) {
		u, err := c.Dynamic.Resource(apiresources.ConfigMap).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("configmap %s/%s not found", namespace, name)
		}
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("configmap %s/%s: %w (%s)", namespace, name, err, l.grantFor(ctx, c))
		}
		if err != nil {
			return nil, fmt.Errorf("configmap %s/%s: %w", namespace, name, err)
		}
		return view(u), nil
	})
	return v, err
}

// configMapKey prefixes the cache keys of a ConfigMap's reads, which its
// change drops.
func configMapKey(key string) string { return "configmap " + key + " " }

// grantFor says who was refused, and who to grant the read to: the API
// server's refusal does not always say (its answer to some requests is
// a bare 403).
func (l *Loader) grantFor(ctx context.Context, c *Clients) string {
	if ns := tenant.Of(ctx); ns != "" {
		return "forbidden for " + c.User + ", the identity of the policy's namespace: bind a Role granting it in namespace " + ns
	}
	return "forbidden for tally-scanner: grant it read access (RBAC aggregated into tally-scanner-resources)"
}

// watchConfigMaps records that a policy reads a ConfigMap, starts the
// ConfigMap watch if it is not running, and returns the channel closed
// once it listed them.
func (l *Loader) watchConfigMaps(policy, key string) (<-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		return nil, fmt.Errorf("the data loader is not running")
	}
	if l.readers[key] == nil {
		l.readers[key] = map[string]bool{}
	}
	l.readers[key][policy] = true
	if l.source == nil {
		l.requests.WithLabelValues("list-configmaps").Inc()
		l.source = watch.Start(l.ctx, l.client, apiresources.ConfigMap, l)
	}
	return l.listed, nil
}

// view is what a configMap entry reads of a ConfigMap.
func view(u *unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	if d, ok := u.Object["data"]; ok {
		out["data"] = d
	}
	if m, ok := u.Object["metadata"].(map[string]any); ok {
		meta := maps.Clone(m)
		delete(meta, "managedFields")
		out["metadata"] = meta
	}
	return out
}

// Upsert records a ConfigMap (watch.Sink).
func (l *Loader) Upsert(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	key := u.GetNamespace() + "/" + u.GetName()
	v := view(u)
	l.mu.Lock()
	old, had := l.cms[key]
	l.cms[key] = v
	l.mu.Unlock()
	if had && sameContent(old, v) {
		return // a resourceVersion or status change: no policy reads another value
	}
	l.changed(key)
}

// sameContent compares what policies read of a ConfigMap: its data,
// labels and annotations.
func sameContent(a, b map[string]any) bool {
	if !reflect.DeepEqual(a["data"], b["data"]) {
		return false
	}
	am, _ := a["metadata"].(map[string]any)
	bm, _ := b["metadata"].(map[string]any)
	return reflect.DeepEqual(am["labels"], bm["labels"]) && reflect.DeepEqual(am["annotations"], bm["annotations"])
}

// Remove forgets a deleted ConfigMap (watch.Sink).
func (l *Loader) Remove(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	key := u.GetNamespace() + "/" + u.GetName()
	l.mu.Lock()
	_, had := l.cms[key]
	delete(l.cms, key)
	l.mu.Unlock()
	if had {
		l.changed(key)
	}
}

// Replace forgets the ConfigMaps not in a complete list (watch.Sink).
func (l *Loader) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[u.GetNamespace()+"/"+u.GetName()] = true
	}
	l.mu.Lock()
	var gone []string
	for key := range l.cms {
		if !present[key] {
			gone = append(gone, key)
			delete(l.cms, key)
		}
	}
	l.mu.Unlock()
	for _, key := range gone {
		l.changed(key)
	}
}

// Listed marks the cache complete (watch.Sink).
func (l *Loader) Listed(context.Context, schema.GroupVersionResource) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.isListed {
		l.isListed = true
		close(l.listed)
	}
}

// changed tells OnChange the policies that read a ConfigMap (the reads
// made with a tenant's identity are made again).
func (l *Loader) changed(key string) {
	l.mu.Lock()
	prefix := configMapKey(key)
	for k := range l.calls {
		if strings.HasPrefix(k, prefix) {
			delete(l.calls, k)
		}
	}
	policies := slices.Sorted(maps.Keys(l.readers[key]))
	listed := l.isListed
	l.mu.Unlock()
	if !listed || len(policies) == 0 || l.opts.OnChange == nil {
		return // the first list is no change: nothing was read before it
	}
	l.opts.OnChange(policies)
}

// Readers returns the policies that read a ConfigMap ("namespace/name").
func (l *Loader) Readers(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.readers[key]))
}

// apiCall makes a urlPath call (GET, or POST with data), reusing an
// answer for CallTTL, then applies jmesPath and default. The path is sent
// as parsed (engine.ParseAPIPath), with the identity of the policy's
// namespace for a namespaced policy.
func (l *Loader) apiCall(ctx context.Context, policy string, call *kyvernov1.ContextAPICall, data map[string]any) (any, error) {
	return apiCall(call, data, func(method, path string, body []byte) (any, error) {
		p, err := engine.ParseAPIPath(path)
		if err != nil {
			return nil, fmt.Errorf("failed to fetch data for APICall: %w (no call made)", err)
		}
		if ns := tenant.Of(ctx); ns != "" && !engine.InNamespacePath(p.Path, ns) {
			return nil, fmt.Errorf("failed to fetch data for APICall: %s %s: %w", method, p, ErrOutsideNamespace)
		}
		return l.call(ctx, policy, method, p, body)
	})
}

// call makes one API call, or reuses its answer of less than CallTTL ago.
func (l *Loader) call(ctx context.Context, policy, method string, p engine.APIPath, body []byte) (any, error) {
	c, as, err := l.clientsFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch data for APICall: %s %s: %w", method, p, err)
	}
	return l.cached(ctx, method+" "+p.String()+" "+string(body)+as, "api-call", func(ctx context.Context) (any, error) {
		v, err := l.fetch(ctx, c, method, p, body)
		if apierrors.IsForbidden(err) && l.opts.OnForbidden != nil {
			l.opts.OnForbidden(policy, err)
		}
		return v, err
	})
}

// fetch makes one API call: its answer as JSON, or an error naming the
// call (and, when RBAC refused it, the grant to add). The request's path
// is checked as client-go will send it.
func (l *Loader) fetch(ctx context.Context, c *Clients, method string, p engine.APIPath, body []byte) (any, error) {
	req := c.REST.Verb(method).AbsPath(p.Path)
	for k, vs := range p.Query {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	if sent := req.URL(); sent.Path != p.Path || sent.RawPath != "" || sent.Fragment != "" {
		return nil, fmt.Errorf("failed to fetch data for APICall: %s %s: the path sent would be %s (no call made)", method, p, sent.EscapedPath())
	}
	if body != nil {
		req = req.Body(body).SetHeader("Content-Type", "application/json")
	}
	raw, err := req.DoRaw(ctx)
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("failed to fetch data for APICall: failed to %s resource with raw url: %s: %w (%s)", method, p, err, l.grantFor(ctx, c))
	}
	if err != nil {
		return nil, fmt.Errorf("failed to fetch data for APICall: failed to %s resource with raw url: %s: %w", method, p, err)
	}
	var value any
	if err := json.Unmarshal(raw, &value); err != nil {
		return nil, fmt.Errorf("failed to fetch data for APICall: %s %s: the answer is not JSON: %w", method, p, err)
	}
	return value, nil
}

// context is the loader's run context (nil before Run).
func (l *Loader) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx
}

// cached reads through the call cache: an answer (or error) of less than
// CallTTL ago is reused; a read cut by ctx is not remembered. kind labels
// the requests metric.
func (l *Loader) cached(ctx context.Context, key, kind string, read func(context.Context) (any, error)) (any, error) {
	now := l.opts.Clock.Now()
	l.mu.Lock()
	e, ok := l.calls[key]
	if ok && l.fresh(e, now) {
		e.used = now
		l.mu.Unlock()
		return e.value, e.err
	}
	l.mu.Unlock()
	type answer struct {
		value any
		err   error
	}
	// Concurrent reads of one key make one request, which outlives a
	// caller that gives up (bounded by ReadTimeout, a tenant's by
	// TenantReadTimeout): its answer serves the others.
	timeout := ReadTimeout
	if tenant.Of(ctx) != "" {
		timeout = l.opts.TenantReadTimeout
	}
	ch := l.flight.DoChan(key, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		l.requests.WithLabelValues(kind).Inc()
		value, err := read(rctx)
		// Its age counts from the answer: a read that took its whole
		// timeout is reused as long as a quick one.
		done := l.opts.Clock.Now()
		l.mu.Lock()
		for k, old := range l.calls { // swept as they expire
			if !l.fresh(old, done) {
				delete(l.calls, k)
			}
		}
		l.calls[key] = &callEntry{at: done, used: done, value: value, err: err}
		l.mu.Unlock()
		return answer{value, err}, nil
	})
	select {
	case r := <-ch:
		a := r.Val.(answer)
		return a.value, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", key, ctx.Err())
	}
}

var _ cel.ClusterData = (*Loader)(nil)

// GetResource serves resource.Get of CEL policies: one object, read from
// the API server (with a namespaced policy's identity for one), each
// answer reused for CallTTL.
func (l *Loader) GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	gvr, err := gvrOf(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	c, as, err := l.clientsFor(ctx)
	if err != nil {
		return nil, err
	}
	return l.cachedObject(ctx, "get "+gvr.String()+" "+namespace+"/"+name+as, func(ctx context.Context) (map[string]any, error) {
		ri := c.Dynamic.Resource(gvr)
		var r dynamic.ResourceInterface = ri
		if namespace != "" {
			r = ri.Namespace(namespace)
		}
		u, err := r.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("%w (%s)", err, l.grantFor(ctx, c))
		}
		if err != nil {
			return nil, err
		}
		return u.Object, nil
	})
}

// ListResources serves resource.List of CEL policies: a list object.
func (l *Loader) ListResources(ctx context.Context, apiVersion, resource, namespace string) (map[string]any, error) {
	gvr, err := gvrOf(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	c, as, err := l.clientsFor(ctx)
	if err != nil {
		return nil, err
	}
	return l.cachedObject(ctx, "list "+gvr.String()+" "+namespace+as, func(ctx context.Context) (map[string]any, error) {
		ri := c.Dynamic.Resource(gvr)
		var r dynamic.ResourceInterface = ri
		if namespace != "" {
			r = ri.Namespace(namespace)
		}
		list, err := r.List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("%w (%s)", err, l.grantFor(ctx, c))
		}
		if err != nil {
			return nil, err
		}
		return list.UnstructuredContent(), nil
	})
}

func gvrOf(apiVersion, resource string) (schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("apiVersion %q: %w", apiVersion, err)
	}
	if resource == "" {
		return schema.GroupVersionResource{}, fmt.Errorf("no resource given")
	}
	return gv.WithResource(resource), nil
}

// cachedObject is cached for reads that answer an object.
func (l *Loader) cachedObject(ctx context.Context, key string, read func(context.Context) (map[string]any, error)) (map[string]any, error) {
	v, err := l.cached(ctx, key, "resource", func(ctx context.Context) (any, error) { return read(ctx) })
	obj, _ := v.(map[string]any)
	return obj, err
}

// apiCall evaluates a urlPath entry: its path and data with variables
// substituted, the call made by do, then jmesPath and default applied.
func apiCall(call *kyvernov1.ContextAPICall, data map[string]any, do func(method, path string, body []byte) (any, error)) (any, error) {
	path, err := variables.SubstituteString(call.URLPath, data)
	if err != nil {
		return nil, fmt.Errorf("apiCall.urlPath: %w", err)
	}
	method := call.Method
	if method == "" {
		method = "GET"
	}
	var body []byte
	if call.Data != nil && method == "POST" {
		var raw any
		if err := json.Unmarshal(call.Data.Raw, &raw); err != nil {
			return nil, fmt.Errorf("apiCall.data: %w", err)
		}
		sub, err := variables.Substitute(raw, data)
		if err != nil {
			return nil, fmt.Errorf("apiCall.data: %w", err)
		}
		obj := map[string]any{}
		list, _ := sub.([]any)
		for _, item := range list {
			if kv, ok := item.(map[string]any); ok {
				if k, ok := kv["key"].(string); ok {
					obj[k] = kv["value"]
				}
			}
		}
		if body, err = json.Marshal(obj); err != nil {
			return nil, fmt.Errorf("apiCall.data: %w", err)
		}
	}
	value, err := do(method, path, body)
	if err == nil && call.JMESPath != "" {
		expr, serr := variables.SubstituteString(call.JMESPath, data)
		if serr != nil {
			return nil, fmt.Errorf("apiCall.jmesPath: %w", serr)
		}
		value, err = variables.Query(expr, value)
		if err != nil {
			err = fmt.Errorf("apiCall.jmesPath %q: %w", expr, err)
		}
	}
	if (err != nil || value == nil) && call.Default != nil {
		var def any
		if derr := json.Unmarshal(call.Default.Raw, &def); derr != nil {
			return nil, fmt.Errorf("apiCall.default: %w", derr)
		}
		return variables.Substitute(def, data)
	}
	return value, err
}

var (
	_ cel.HTTPData   = (*Loader)(nil)
	_ cel.ImageData  = (*Loader)(nil)
	_ cel.GlobalData = (*Loader)(nil)
)
