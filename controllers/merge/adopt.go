package merge

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/report"
)

// Adoption (R45). Kyverno's mutating webhook sees a CREATE before the API
// server gives the object its UID: the EphemeralReport of a classic mutate
// rule names its resource by kind, namespace and name alone, with an empty
// resource UID. Kyverno's reports controller adopts such a report by
// reading the resource of that name, and deletes one still unowned two
// minutes after its creation. The merger does the same, without writing
// the report: it reads the resource's UID and folds the report under it.

// adoptWithin is how long after its creation a report may wait for its
// resource, as Kyverno's reports controller waits.
const adoptWithin = 2 * time.Minute

// adopt reads the resource a waiting report names and folds the report
// under its UID; a resource not there yet is read again, until
// adoptWithin has passed since the report's creation: then the report is
// deleted, as Kyverno deletes it.
func (m *intake) adopt(ctx context.Context, key string) error {
	m.mu.Lock()
	w, ok := m.unadopted[key]
	m.mu.Unlock()
	if !ok {
		return nil // deleted meanwhile, or adopted
	}
	u := w.report
	labels := u.GetLabels()
	gvr, ok := report.ParseGVRLabel(labels[report.LabelResourceGVR])
	namespaced := u.GetAnnotations()[report.AnnotationResourceNamespace] != ""
	if !ok {
		var err error
		gv := schema.GroupVersion{Group: labels[report.LabelResourceGroup], Version: labels[report.LabelResourceVersion]}
		if gvr, namespaced, err = m.cl.ownerGVR(ownerRef{apiVersion: gv.String(), kind: labels[report.LabelResourceKind], namespace: u.GetAnnotations()[report.AnnotationResourceNamespace]}); err != nil {
			return m.giveUp(ctx, key, w, fmt.Sprintf("its resource's type cannot be told: %v", err))
		}
	}
	ns := ""
	if namespaced {
		ns = u.GetNamespace()
	}
	name := u.GetAnnotations()[report.AnnotationResourceName]
	obj, err := m.client.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if m.opts.Now().Sub(u.GetCreationTimestamp().Time) >= adoptWithin {
			return m.giveUp(ctx, key, w, fmt.Sprintf("no %s %s/%s within %s of its creation", gvr.Resource, ns, name, adoptWithin))
		}
		m.queue.AddAfter(key, 2*time.Second)
		return nil
	case err != nil:
		return fmt.Errorf("adopt %s %s/%s: get its resource %s %s/%s: %w", w.gvr.Resource, u.GetNamespace(), u.GetName(), gvr.Resource, ns, name, err)
	}
	m.mu.Lock()
	if cur, ok := m.unadopted[key]; !ok || cur.report != u {
		m.mu.Unlock()
		return nil // changed or deleted meanwhile: its own event decides
	}
	delete(m.unadopted, key)
	m.mu.Unlock()
	named := u.DeepCopy() // the object the watch gave is shared
	l := named.GetLabels()
	l[report.LabelResourceUID] = string(obj.GetUID())
	if _, ok := l[report.LabelResourceGVR]; !ok {
		if v := report.GVRLabel(gvr); len(v) <= 63 {
			l[report.LabelResourceGVR] = v
		}
	}
	named.SetLabels(l)
	m.upsertFolded(ctx, w.gvr, named)
	return nil
}

// giveUp deletes a report that cannot be adopted.
func (m *intake) giveUp(ctx context.Context, key string, w unadopted, why string) error {
	u := w.report
	m.metrics.unusable.Inc()
	logr.FromContextOrDiscard(ctx).Info("admission report names a resource that cannot be found; deleted without merging it", "kind", w.gvr.Resource, "namespace", u.GetNamespace(), "name", u.GetName(), "why", why)
	if _, err := m.cl.deleteReport(ctx, sourceKey{w.gvr, u.GetNamespace(), u.GetName()}, foldSource{uid: u.GetUID(), resourceVersion: u.GetResourceVersion()}); err != nil {
		return err // tried again
	}
	m.mu.Lock()
	delete(m.unadopted, key)
	m.mu.Unlock()
	return nil
}
