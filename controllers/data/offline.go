package data

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/variables"
)

// Offline serves what policies read from the cluster out of a fixed set of
// objects, as the Kyverno CLI does from a context file (`kyverno apply
// --context-file`, `context:` of kyverno-test.yaml) or a test's
// clusterResources: configMap entries, apiCall urlPath GETs (an object or
// a list, as the API server would answer them) and CEL resource.Get/List.
// What is not among the objects is an error naming it, in the API
// server's words ("secrets \"x\" not found"). Safe for concurrent use (it
// never changes).
type Offline struct {
	// byResource holds the objects by group/version/resource (the plural
	// guessed from the kind, as Kubernetes' REST mapper guesses it).
	byResource map[schema.GroupVersionResource][]map[string]any
	// images are a context file's spec.images, by image.
	images map[string]map[string]any
}

// AddImages adds the images of a context file (spec.images: image,
// resolvedImage, registry, repository, tag, digest, imageIndex, manifest,
// config), served to image.GetMetadata and imageRegistry entries.
func (o *Offline) AddImages(images []map[string]any) error {
	for i, img := range images {
		ref, _ := img["image"].(string)
		if ref == "" {
			return fmt.Errorf("context image %d: image is required", i+1)
		}
		if o.images == nil {
			o.images = map[string]map[string]any{}
		}
		md := maps.Clone(img)
		if _, ok := md["configData"]; !ok {
			md["configData"] = md["config"]
		}
		o.images[ref] = md
	}
	return nil
}

// ImageMetadata serves image.GetMetadata offline.
func (o *Offline) ImageMetadata(_ context.Context, ref string, _ []string, _ bool) (map[string]any, error) {
	md, ok := o.images[ref]
	if !ok {
		return nil, fmt.Errorf("image data for %s not found in the context", ref)
	}
	return md, nil
}

// NewOffline returns an Offline serving objs. Objects without apiVersion,
// kind or name are refused with an error naming them.
func NewOffline(objs []map[string]any) (*Offline, error) {
	o := &Offline{byResource: map[schema.GroupVersionResource][]map[string]any{}}
	for i, obj := range objs {
		u := unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		if gvk.Version == "" || gvk.Kind == "" || u.GetName() == "" {
			return nil, fmt.Errorf("context resource %d (%s %q): apiVersion, kind and metadata.name are required", i+1, gvk.Kind, u.GetName())
		}
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		o.byResource[gvr] = append(o.byResource[gvr], obj)
	}
	return o, nil
}

var _ cel.ClusterData = (*Offline)(nil)

// Load implements engine.ContextLoader.
func (o *Offline) Load(ctx context.Context, _ string, entry kyvernov1.ContextEntry, data map[string]any) (any, error) {
	switch {
	case entry.ConfigMap != nil:
		namespace, name, err := engine.ConfigMapOf(entry.ConfigMap, data)
		if err != nil {
			return nil, err
		}
		cm, err := o.get(apiresources.ConfigMap, namespace, name)
		if err != nil {
			return nil, fmt.Errorf("configmap %s/%s not found in the context", namespace, name)
		}
		return view(&unstructured.Unstructured{Object: cm}), nil
	case entry.APICall != nil && entry.APICall.Service != nil:
		return nil, fmt.Errorf("apiCall.service: calls to services are not made offline")
	case entry.APICall != nil:
		return apiCall(entry.APICall, data, func(method, path string, _ []byte) (any, error) {
			if method != "GET" {
				return nil, fmt.Errorf("failed to fetch data for APICall: %s %s: only GET is served offline", method, path)
			}
			v, err := o.serve(path)
			if err != nil {
				return nil, fmt.Errorf("failed to fetch data for APICall: failed to GET resource with raw url: %s: %w", path, err)
			}
			return v, nil
		})
	case entry.GlobalReference != nil:
		return nil, fmt.Errorf("globalReference %s: GlobalContextEntries are not served offline", entry.GlobalReference.Name)
	case entry.ImageRegistry != nil:
		ref, err := variables.SubstituteString(entry.ImageRegistry.Reference, data)
		if err != nil {
			return nil, fmt.Errorf("imageRegistry.reference: %w", err)
		}
		md, err := o.ImageMetadata(ctx, ref, nil, false)
		if err != nil || entry.ImageRegistry.JMESPath == "" {
			return md, err
		}
		return variables.Query(entry.ImageRegistry.JMESPath, md)
	}
	return nil, fmt.Errorf("unknown context entry type")
}

// serve answers a GET of an API path: /api/v1/... or /apis/GROUP/VERSION/...,
// then [namespaces/NS/]RESOURCE[/NAME] (or namespaces/NAME itself).
func (o *Offline) serve(path string) (any, error) {
	path, _, _ = strings.Cut(path, "?")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var gv schema.GroupVersion
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gv, parts = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gv, parts = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return nil, fmt.Errorf("%q is not an API path (/api/v1/... or /apis/GROUP/VERSION/...)", path)
	}
	namespace := ""
	if len(parts) >= 3 && parts[0] == "namespaces" {
		namespace, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 1:
		return o.list(gv.WithResource(parts[0]), namespace), nil
	case 2:
		return o.get(gv.WithResource(parts[0]), namespace, parts[1])
	}
	return nil, fmt.Errorf("%q: subresources are not served offline", path)
}

func (o *Offline) get(gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error) {
	for _, obj := range o.byResource[gvr] {
		u := unstructured.Unstructured{Object: obj}
		if u.GetName() == name && u.GetNamespace() == namespace {
			return obj, nil
		}
	}
	return nil, fmt.Errorf("%s %q not found", gvr.Resource, name)
}

// list is a list object of the objects stored under exactly namespace
// ("" lists every namespace's), as the Kyverno CLI's context serves them.
func (o *Offline) list(gvr schema.GroupVersionResource, namespace string) map[string]any {
	items := []any{}
	kind := "List"
	for _, obj := range o.byResource[gvr] {
		u := unstructured.Unstructured{Object: obj}
		kind = u.GetKind() + "List"
		if namespace == "" || u.GetNamespace() == namespace {
			items = append(items, obj)
		}
	}
	return map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "metadata": map[string]any{}, "items": items}
}

// GetResource serves CEL's resource.Get.
func (o *Offline) GetResource(_ context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	gvr, err := gvrOf(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	return o.get(gvr, namespace, name)
}

// ListResources serves CEL's resource.List.
func (o *Offline) ListResources(_ context.Context, apiVersion, resource, namespace string) (map[string]any, error) {
	gvr, err := gvrOf(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	return o.list(gvr, namespace), nil
}
