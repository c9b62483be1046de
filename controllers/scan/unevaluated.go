package scan

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	"github.com/tally-dev/tally/controllers/catalog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
)

// Policy kinds Kyverno evaluates and tally does not (R46,
// catalog.KyvernoOnly): served where Kyverno's CRDs are
// installed (beside Kyverno), where Kyverno's reports controller would
// report them in the background and tally's scan, which replaces it, does
// not. Each such policy gets a Warning Event PolicyNotEvaluated, once per
// generation, from the replica that keeps the policies' status. tally
// writes no status on them: they are Kyverno's.

// unevaluatedSink tells of each policy of an unevaluated kind.
type unevaluatedSink struct {
	// recorder tells (nil: another replica keeps the policies' status).
	recorder record.EventRecorder
	metrics  *metrics
	// told: the generation told of, by kind, namespace and name.
	told sync.Map
}

func (n *unevaluatedSink) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if n.recorder == nil {
		return // another replica keeps the policies' status, and tells
	}
	key := gvr.Resource + "/" + u.GetNamespace() + "/" + u.GetName()
	if prev, ok := n.told.Load(key); ok && prev.(int64) == u.GetGeneration() {
		return
	}
	n.told.Store(key, u.GetGeneration())
	if k, ok := catalog.KindOf(gvr); ok && k.Family == catalog.KyvernoOnly {
		n.metrics.unevaluated.WithLabelValues(k.Name).Inc()
		n.recorder.Eventf(u, corev1.EventTypeWarning, "PolicyNotEvaluated",
			"tally does not evaluate %s policies: %s not reported by tally's background scan", k.Name, k.NotReported)
		logr.FromContextOrDiscard(ctx).Info("policy of a kind tally does not evaluate", "kind", k.Name, "policy", u.GetNamespace()+"/"+u.GetName())
	}
}

func (n *unevaluatedSink) Remove(_ context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	n.told.Delete(gvr.Resource + "/" + u.GetNamespace() + "/" + u.GetName())
}

func (n *unevaluatedSink) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	for _, u := range objs {
		n.Upsert(ctx, gvr, u)
	}
}

func (n *unevaluatedSink) Listed(context.Context, schema.GroupVersionResource) {}
