package watch

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/api/apiresources"
)

// ListByNamespace lists the objects of gvr matching opts (its Limit the
// page size) page by page, handing each page to fn. A namespaced kind is
// listed one namespace at a time, of the namespaces owns accepts (nil:
// every one): a shard reads its own namespaces only, and a server that
// ignores limit and continue (reports-server, which answers any list with
// everything it holds) still answers with one namespace's objects at a
// time, not the whole store's at once.
func ListByNamespace(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, namespaced bool,
	opts metav1.ListOptions, owns func(namespace string) bool, fn func(items []unstructured.Unstructured) error) error {
	if !namespaced {
		return listPages(ctx, client.Resource(gvr), gvr, opts, fn)
	}
	var namespaces []string
	err := listPages(ctx, client.Resource(apiresources.Namespace), apiresources.Namespace, metav1.ListOptions{Limit: ListPageSize},
		func(items []unstructured.Unstructured) error {
			for i := range items {
				if name := items[i].GetName(); owns == nil || owns(name) {
					namespaces = append(namespaces, name)
				}
			}
			return nil
		})
	if err != nil {
		return err
	}
	for _, ns := range namespaces {
		if err := listPages(ctx, client.Resource(gvr).Namespace(ns), gvr, opts, fn); err != nil {
			return err
		}
	}
	return nil
}

// listPages lists with opts, following continue tokens.
func listPages(ctx context.Context, client dynamic.ResourceInterface, gvr schema.GroupVersionResource, opts metav1.ListOptions,
	fn func(items []unstructured.Unstructured) error) error {
	for {
		list, err := client.List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		if err := fn(list.Items); err != nil {
			return err
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

// WithNamespaces adds to objs a Namespace for each namespace they are in,
// for fake clients (a namespaced kind is listed namespace by namespace).
func WithNamespaces(objs ...runtime.Object) []runtime.Object {
	seen := map[string]bool{}
	out := slices.Clone(objs)
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil || m.GetNamespace() == "" || seen[m.GetNamespace()] {
			continue
		}
		seen[m.GetNamespace()] = true
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": m.GetNamespace()}}})
	}
	return out
}
