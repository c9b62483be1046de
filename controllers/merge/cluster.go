package merge

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/report"
)

// cluster reads and deletes in the cluster what several layers need read
// or deleted: a report's resource (is it gone?), an intermediate report.
// It holds no state.
type cluster struct {
	client dynamic.Interface
	opts   *Options
}

// resourceGone tells whether the resource of uid no longer exists. An error
// means it could not tell.
func (c *cluster) resourceGone(ctx context.Context, uid string, o ownerRef) (bool, error) {
	if o.name == "" {
		return false, errors.New("report names no resource")
	}
	gvr, namespaced, err := c.ownerGVR(o)
	if err != nil {
		return false, err
	}
	if c.opts.Mapper != nil {
		// A 404 proves the object gone only if its type is served.
		if _, err := c.opts.Mapper.KindFor(gvr); err != nil {
			return false, fmt.Errorf("resource type %s: %w", gvr, err)
		}
	}
	ns := ""
	if namespaced {
		ns = o.namespace
	}
	obj, err := c.client.Resource(gvr).Namespace(ns).Get(ctx, o.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Only "this named object does not exist" counts: a 404 for an
		// unknown resource type carries no name.
		var st apierrors.APIStatus
		if errors.As(err, &st) && st.Status().Details != nil && st.Status().Details.Name == o.name {
			return true, nil
		}
		return false, fmt.Errorf("get %s %s/%s: %w", gvr, ns, o.name, err)
	}
	if err != nil {
		return false, fmt.Errorf("get %s %s/%s: %w", gvr, ns, o.name, err)
	}
	return obj.GetUID() != types.UID(uid), nil
}

// ownerGVR finds the resource type of a report's resource: from its
// audit.kyverno.io/resource.gvr label, else from apiVersion and kind through
// the RESTMapper.
func (c *cluster) ownerGVR(o ownerRef) (schema.GroupVersionResource, bool, error) {
	if gvr, ok := report.ParseGVRLabel(o.gvrLabel); ok {
		return gvr, o.namespace != "", nil
	}
	if c.opts.Mapper == nil || o.kind == "" {
		return schema.GroupVersionResource{}, false, fmt.Errorf("no %s label and no way to map %s %s", report.LabelResourceGVR, o.apiVersion, o.kind)
	}
	gv, err := schema.ParseGroupVersion(o.apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, false, fmt.Errorf("owner apiVersion %q: %w", o.apiVersion, err)
	}
	mapping, err := c.opts.Mapper.RESTMapping(gv.WithKind(o.kind).GroupKind(), gv.Version)
	if err != nil {
		return schema.GroupVersionResource{}, false, fmt.Errorf("map %s %s: %w", o.apiVersion, o.kind, err)
	}
	return mapping.Resource, mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// deleteReport deletes one admission report unless it changed since it was
// read (its newer content is merged in its turn): deleted says whether it
// was this call that deleted it. Gone already is no error.
func (c *cluster) deleteReport(ctx context.Context, k sourceKey, s foldSource) (deleted bool, err error) {
	opts := metav1.DeleteOptions{}
	if s.uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &s.uid}
		if s.resourceVersion != "" {
			opts.Preconditions.ResourceVersion = &s.resourceVersion
		}
	}
	err = c.client.Resource(k.gvr).Namespace(k.namespace).Delete(ctx, k.name, opts)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	default:
		return false, fmt.Errorf("delete %s %s/%s: %w", k.gvr.Resource, k.namespace, k.name, err)
	}
}
