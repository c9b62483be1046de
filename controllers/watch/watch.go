// Package watch lists then watches kinds through client-go reflectors that
// feed a Sink directly, instead of an informer cache: the caller's own store
// is the only copy of each object, which is what keeps tally's memory flat.
package watch

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// ListPageSize bounds each LIST page, so a large kind is read in pieces.
const ListPageSize = 500

// Sink receives what a Source sees. The objects are not shared with any
// cache: a Sink may keep or modify them.
//
// Each call gets the Source's context (its logger included), which ends
// when the Source stops: a Sink keeps no context of its own.
type Sink interface {
	Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured)
	Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured)
	// Replace says that objs is the complete current list of the kind.
	Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured)
	// Listed is called once the first complete list was delivered.
	Listed(ctx context.Context, gvr schema.GroupVersionResource)
}

// StreamingSink is a Sink that takes listed objects one at a time: each is
// delivered through Upsert as soon as it is read (page by page, or event by
// event in a streaming watch-list), and the reflector keeps only a stub of
// it, so that no complete list of a large kind is ever held in memory.
// Replace then receives stubs: apiVersion, kind and metadata (name,
// namespace, uid, resourceVersion) only.
type StreamingSink interface {
	Sink
	StreamsLists()
}

// sinkPanics counts the Sink calls that panicked (SinkPanics).
var sinkPanics atomic.Int64

// SinkPanics counts the Sink calls of this process that panicked and were
// recovered: the object was skipped and its Source went on.
func SinkPanics() int64 { return sinkPanics.Load() }

// guard calls fn, recovering a panic: it is logged with its stack (never
// its value, which may hold an object's content) and counted, and returned
// as an error. A Sink's panic on one object must not take down the process
// (which would then crash on the same object at every start).
func guard(log logr.Logger, gvr schema.GroupVersionResource, what string, fn func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			sinkPanics.Add(1)
			err = fmt.Errorf("%s panicked (%T) at\n%s", what, p, debug.Stack())
			log.Error(err, "a sink call panicked; the object is skipped", "gvr", gvr.String())
		}
	}()
	fn()
	return nil
}

// Source lists then watches one kind through a client-go Reflector.
type Source struct {
	GVR schema.GroupVersionResource
	// Namespace is the namespace watched ("": all).
	Namespace string
	cancel    context.CancelFunc
	done      chan struct{}
}

// Start runs a Source of every namespace until ctx ends or Stop is called.
func Start(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, s Sink) *Source {
	return StartIn(ctx, client, gvr, "", s)
}

// StartIn runs a Source of one namespace ("": all) until ctx ends or Stop
// is called: the API server filters, and the Sink's Replace receives that
// namespace's complete list.
func StartIn(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, namespace string, s Sink) *Source {
	ctx, cancel := context.WithCancel(ctx)
	src := &Source{GVR: gvr, Namespace: namespace, cancel: cancel, done: make(chan struct{})}
	log := logr.FromContextOrDiscard(ctx)
	_, streaming := s.(StreamingSink)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := client.Resource(gvr).Namespace(namespace).List(ctx, opts)
			if err != nil || !streaming {
				return list, err
			}
			for i := range list.Items {
				u := list.Items[i]                                               // the sink may keep it; the page keeps a stub
				_ = guard(log, gvr, "upsert", func() { s.Upsert(ctx, gvr, &u) }) // logged and counted; the list goes on
				list.Items[i] = *stub(&u)
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := client.Resource(gvr).Namespace(namespace).Watch(ctx, opts)
			if err != nil || !streaming || opts.SendInitialEvents == nil || !*opts.SendInitialEvents {
				return w, err
			}
			return streamInitialEvents(ctx, w, gvr, &guardedSink{Sink: s, log: log, gvr: gvr}), nil
		},
	}
	store := &storeAdapter{ctx: ctx, gvr: gvr, sink: s, log: log}
	r := cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{}, store, cache.ReflectorOptions{
		Name: "tally " + gvr.String() + " " + namespace,
	})
	r.WatchListPageSize = ListPageSize
	go func() {
		defer close(src.done)
		r.RunWithContext(ctx)
	}()
	return src
}

// stub is what the reflector keeps of a streamed object: enough for its
// keys, resource versions and the sink's Replace.
func stub(u *unstructured.Unstructured) *unstructured.Unstructured {
	md := map[string]any{"name": u.GetName(), "uid": string(u.GetUID()), "resourceVersion": u.GetResourceVersion()}
	if ns := u.GetNamespace(); ns != "" {
		md["namespace"] = ns
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": md}}
}

// streamInitialEvents delivers the initial events of a watch-list (the
// synthetic ADDED events before the "initial events end" bookmark) to the
// sink as they arrive, and passes stubs on to the reflector, which would
// otherwise gather every object before its Replace.
func streamInitialEvents(ctx context.Context, w watch.Interface, gvr schema.GroupVersionResource, s Sink) watch.Interface {
	initial := true
	return filter(w, func(e watch.Event) (watch.Event, bool) {
		if !initial {
			return e, true
		}
		switch e.Type {
		case watch.Added:
			if u, ok := e.Object.(*unstructured.Unstructured); ok {
				s.Upsert(ctx, gvr, u)
				e.Object = stub(u)
			}
		case watch.Bookmark:
			if m, err := meta.Accessor(e.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				initial = false
			}
		}
		return e, true
	})
}

// Stop ends the Source and waits for it.
func (s *Source) Stop() {
	s.cancel()
	<-s.done
}

// Cancel asks the Source to end; Done is closed when it has.
func (s *Source) Cancel() { s.cancel() }

// Done is closed once the Source has ended.
func (s *Source) Done() <-chan struct{} { return s.done }

// guardedSink recovers the panics of a Sink's Upsert (guard).
type guardedSink struct {
	Sink
	log logr.Logger
	gvr schema.GroupVersionResource
}

func (g *guardedSink) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	_ = guard(g.log, g.gvr, "upsert", func() { g.Sink.Upsert(ctx, gvr, u) }) // logged and counted; the stream goes on
}

// storeAdapter is the cache.Store a Reflector writes to; it forwards to a
// Sink, recovering its panics (guard): an object whose Upsert or Remove
// panics is skipped, a Replace that panics fails the list, which the
// Reflector retries with its backoff.
type storeAdapter struct {
	// ctx is the Source's, handed to the Sink: cache.Store's methods take
	// none, and the adapter lives exactly as long as the Source.
	ctx      context.Context
	gvr      schema.GroupVersionResource
	sink     Sink
	log      logr.Logger
	replaced bool
}

var _ cache.Store = (*storeAdapter)(nil)

func asUnstructured(obj any) (*unstructured.Unstructured, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	return u, nil
}

func (a *storeAdapter) Add(obj any) error {
	u, err := asUnstructured(obj)
	if err != nil {
		return err
	}
	_ = guard(a.log, a.gvr, "upsert", func() { a.sink.Upsert(a.ctx, a.gvr, u) }) // logged and counted; the watch goes on
	return nil
}

func (a *storeAdapter) Update(obj any) error { return a.Add(obj) }

func (a *storeAdapter) Delete(obj any) error {
	u, err := asUnstructured(obj)
	if err != nil {
		return err
	}
	_ = guard(a.log, a.gvr, "remove", func() { a.sink.Remove(a.ctx, a.gvr, u) }) // logged and counted; the watch goes on
	return nil
}

func (a *storeAdapter) Replace(list []any, _ string) error {
	objs := make([]*unstructured.Unstructured, 0, len(list))
	for _, o := range list {
		u, err := asUnstructured(o)
		if err != nil {
			return err
		}
		objs = append(objs, u)
	}
	if err := guard(a.log, a.gvr, "replace", func() { a.sink.Replace(a.ctx, a.gvr, objs) }); err != nil {
		return err // the Reflector lists again, with backoff
	}
	if !a.replaced {
		if err := guard(a.log, a.gvr, "listed", func() { a.sink.Listed(a.ctx, a.gvr) }); err != nil {
			return err
		}
		a.replaced = true
	}
	return nil
}

// The reflector never reads back from its store (no resync is configured).
func (a *storeAdapter) List() []any                                { return nil }
func (a *storeAdapter) ListKeys() []string                         { return nil }
func (a *storeAdapter) Get(any) (item any, exists bool, err error) { return nil, false, nil }
func (a *storeAdapter) GetByKey(string) (any, bool, error)         { return nil, false, nil }
func (a *storeAdapter) Resync() error                              { return nil }
