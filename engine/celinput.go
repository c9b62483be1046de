package engine

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/engine/cel"
)

// celInput is the input of every CEL expression evaluated on the request,
// built once per request: the objects with whole numbers as ints (as
// cel.Shared values: every policy reads the same wrapped fields), the
// admission request (a synthetic CREATE with no user in a background scan,
// as Kyverno's reports controller builds it) and namespaceObject.
func (req *Request) celInput() *cel.Input {
	c := &req.cache
	if c.cel != nil {
		return c.cel
	}
	in := &cel.Input{Data: req.Data}
	var obj, old map[string]any
	if req.Object != nil {
		obj, _ = cel.Normalize(req.Object).(map[string]any)
		in.Object = cel.Shared(obj)
	}
	if req.OldObject != nil {
		old, _ = cel.Normalize(req.OldObject).(map[string]any)
		in.OldObject = cel.Shared(old)
	}
	res := req.shared().res
	gvk := schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind}
	gvr := req.resource()
	kind := map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}
	resource := map[string]any{"group": gvr.Group, "version": gvr.Version, "resource": gvr.Resource}
	user := map[string]any{}
	if u := req.UserInfo; u != nil {
		user["username"] = u.Username
		if u.UID != "" {
			user["uid"] = u.UID
		}
		if len(u.Groups) > 0 {
			user["groups"] = toAnyList(u.Groups)
		}
	}
	r := map[string]any{
		"kind": kind, "requestKind": kind,
		"resource": resource, "requestResource": resource,
		"name": res.Name, "namespace": res.Namespace,
		"operation": req.operation(),
		"userInfo":  user,
		"object":    nilIfEmpty(obj),
		"oldObject": nilIfEmpty(old),
		"dryRun":    false,
	}
	if req.Subresource != "" {
		r["subResource"] = req.Subresource
		r["requestSubResource"] = req.Subresource
	}
	in.Request = r
	in.Namespace = req.namespaceObject(res.Namespace)
	c.cel = in
	return in
}

// CELInput is the request as CEL expressions see it (object, oldObject,
// request, namespaceObject), built once per request: for expressions the
// caller evaluates itself, such as a policy's webhook match conditions.
func (req *Request) CELInput() *cel.Input { return req.celInput() }

// namespaceObject is the Namespace of a namespaced resource: the one the
// caller gave, else one made of its name and the labels known of it; nil
// for a cluster-scoped resource.
func (req *Request) namespaceObject(ns string) map[string]any {
	if req.Namespace != nil {
		if m, ok := cel.Normalize(req.Namespace).(map[string]any); ok {
			return m
		}
	}
	if ns == "" {
		return nil
	}
	// Known by name alone, the namespace has the one label every namespace
	// has (as Kubernetes' matcher assumes).
	labels := map[string]any{"kubernetes.io/metadata.name": ns}
	for k, v := range req.NamespaceLabels {
		labels[k] = v
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ns, "labels": labels},
	}
}

// resource is the request's group, version and plural: the caller's (from
// discovery, or the admission request), else guessed from the kind.
func (req *Request) resource() schema.GroupVersionResource {
	if req.Resource.Resource != "" {
		return req.Resource
	}
	return guessResource(req.shared().res)
}
