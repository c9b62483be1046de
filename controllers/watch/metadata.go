package watch

import (
	"context"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

// StartMetadata runs a Source of the objects of gvr that labelSelector
// selects, reading only their metadata (the API server sends
// PartialObjectMetadata: no results, no spec), until ctx ends or Stop is
// called. The Sink gets each as an Unstructured holding apiVersion, kind
// and metadata (managedFields included). It is what a controller needs to
// notice its own objects changed or deleted by someone else at a small
// fraction of a full watch's cost.
func StartMetadata(ctx context.Context, client metadata.Interface, gvr schema.GroupVersionResource, labelSelector string, s Sink) *Source {
	ctx, cancel := context.WithCancel(ctx)
	src := &Source{GVR: gvr, cancel: cancel, done: make(chan struct{})}
	log := logr.FromContextOrDiscard(ctx)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = labelSelector
			list, err := client.Resource(gvr).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			out := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
			out.SetResourceVersion(list.ResourceVersion)
			out.SetContinue(list.Continue)
			out.Items = make([]unstructured.Unstructured, len(list.Items))
			for i := range list.Items {
				out.Items[i] = *metadataObject(gvr, &list.Items[i])
			}
			return out, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = labelSelector
			w, err := client.Resource(gvr).Watch(ctx, opts)
			if err != nil {
				return nil, err
			}
			return filter(w, func(e watch.Event) (watch.Event, bool) {
				if m, ok := e.Object.(*metav1.PartialObjectMetadata); ok {
					e.Object = metadataObject(gvr, m)
				}
				return e, true
			}), nil
		},
	}
	store := &storeAdapter{ctx: ctx, gvr: gvr, sink: s, log: log}
	r := cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{}, store, cache.ReflectorOptions{
		Name: "tally metadata " + gvr.String(),
	})
	r.WatchListPageSize = ListPageSize
	go func() {
		defer close(src.done)
		r.RunWithContext(ctx)
	}()
	return src
}

// metadataObject is the Unstructured form of an object's metadata.
func metadataObject(gvr schema.GroupVersionResource, m *metav1.PartialObjectMetadata) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(m.Kind)
	meta, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m.ObjectMeta)
	if err == nil {
		u.Object["metadata"] = meta
	}
	return u
}
