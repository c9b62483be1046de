package kind

import (
	"context"
	"errors"
	"fmt"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// FieldManager owns the fields Deploy applies.
const FieldManager = "tally-e2e"

var (
	gvkCRD       = apiextv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")
	gvkNamespace = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	gvrCRD       = apiextv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
)

// Render builds a kustomization directory with the kustomize API, the engine
// of `kubectl kustomize`, and returns its objects in kustomize's order.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	out := make([]*unstructured.Unstructured, 0, rm.Size())
	for _, r := range rm.Resources() {
		// Through JSON, so that numbers are int64 as everywhere in apimachinery.
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, u)
	}
	return out, nil
}

// Describe names an object as "Kind namespace/name" (or "Kind name").
func Describe(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return u.GetKind() + " " + ns + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}

// Deploy renders the overlay in overlayDir and server-side applies every
// object with field manager FieldManager: CRDs first (waiting until they are
// Established), then Namespaces, then the rest. With dryRun every request is
// a server-side dry run (DryRun: All): the server validates, defaults and
// admits each object but stores nothing, so the namespaces the overlay uses
// must already exist. Every object is tried; the error names each object the
// server refused and why.
func Deploy(ctx context.Context, cfg *rest.Config, overlayDir string, dryRun bool) error {
	objs, err := Render(overlayDir)
	if err != nil {
		return err
	}
	return DeployObjects(ctx, cfg, objs, dryRun)
}

// DeployObjects applies rendered objects as Deploy does (CRDs, then
// Namespaces, then the rest; with dryRun, nothing is stored).
func DeployObjects(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) error {
	a, err := newApplier(cfg)
	if err != nil {
		return err
	}

	var crds, namespaces, rest []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GroupVersionKind() {
		case gvkCRD:
			crds = append(crds, o)
		case gvkNamespace:
			namespaces = append(namespaces, o)
		default:
			rest = append(rest, o)
		}
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var errs []error
	apply := func(o *unstructured.Unstructured) {
		if err := a.apply(ctx, o, opts); err != nil {
			errs = append(errs, err)
		}
	}
	for _, o := range crds {
		apply(o)
	}
	if !dryRun && len(crds) > 0 {
		if err := waitEstablished(ctx, a.dyn, crds, 2*time.Minute); err != nil {
			errs = append(errs, err)
		}
		a.mapper.Reset() // the new kinds are served now
	}
	for _, o := range namespaces {
		apply(o)
	}
	for _, o := range rest {
		apply(o)
	}
	return errors.Join(errs...)
}

// waitEstablished waits until every CRD reports Established=True.
func waitEstablished(ctx context.Context, dyn dynamic.Interface, crds []*unstructured.Unstructured, timeout time.Duration) error {
	for _, c := range crds {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(gvrCRD).Get(ctx, c.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				last = "not found"
				return false, nil
			}
			if err != nil {
				return false, err
			}
			var crd apiextv1.CustomResourceDefinition
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
				return false, err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextv1.Established {
					last = fmt.Sprintf("Established=%s: %s", cond.Status, cond.Message)
					return cond.Status == apiextv1.ConditionTrue, nil
				}
			}
			last = "no Established condition yet"
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established (%s): %w", c.GetName(), last, err)
		}
	}
	return nil
}

// ApplyObjects server-side applies already rendered objects, in order, with
// the given field manager (for tests that take a part of an overlay, such as
// its RBAC).
func ApplyObjects(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, fieldManager string) error {
	a, err := newApplier(cfg)
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	var errs []error
	for _, o := range objs {
		if err := a.apply(ctx, o, opts); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// applier server-side applies objects of any kind, mapping kinds to
// resources through the server's discovery.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(cfg *rest.Config) (*applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// apply applies one object; the error names it.
func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, opts metav1.ApplyOptions) error {
	if err := a.applyObject(ctx, o, opts); err != nil {
		return fmt.Errorf("%s: %w", Describe(o), err)
	}
	return nil
}

func (a *applier) applyObject(ctx context.Context, o *unstructured.Unstructured, opts metav1.ApplyOptions) error {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("the server does not serve %s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			return fmt.Errorf("namespaced %s has no namespace", gvk.Kind)
		}
		ri = a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	_, err = ri.Apply(ctx, o.GetName(), o, opts)
	return err
}
