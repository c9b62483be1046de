package scan

import (
	"context"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/controllers/watch"
)

// Policy kinds Kyverno evaluates and tally does not (R46,
// apiresources.KyvernoOnlyPolicies): served where Kyverno's CRDs are
// installed (beside Kyverno), where Kyverno's reports controller would
// report them in the background and tally's scan, which replaces it, does
// not. Each such policy gets a Warning Event PolicyNotEvaluated, once per
// generation, from the replica that keeps the policies' status. tally
// writes no status on them: they are Kyverno's.

// notReported says, by the source of a kind's results, what tally's scan
// does not report of it.
var notReported = map[string]string{
	"KyvernoImageValidatingPolicy": "its image verification results (issue 42)",
	"KyvernoGeneratingPolicy":      "nothing of its own (Kyverno's background controller reports it; tally merges those reports)",
}

// servedUnevaluatedKinds are the unevaluated kinds discovery serves, each
// in its newest served version.
func (k *kindWatch) servedUnevaluatedKinds() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	found := map[string]bool{}
	for _, v := range apiresources.KyvernoOnlyVersions {
		gv := schema.GroupVersion{Group: policiesv1.GroupVersion.Group, Version: v}
		list, err := k.disc.ServerResourcesForGroupVersion(gv.String())
		if err != nil || list == nil {
			continue
		}
		for _, p := range apiresources.KyvernoOnlyPolicies {
			if !found[p.Resource] && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == p.Resource }) {
				found[p.Resource] = true
				out = append(out, gv.WithResource(p.Resource))
			}
		}
	}
	return out
}

// unevaluatedSink tells of each policy of an unevaluated kind.
type unevaluatedSink struct {
	s *Scanner
	// told: the generation told of, by kind, namespace and name.
	told sync.Map
}

func (n *unevaluatedSink) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if n.s.opts.Recorder == nil {
		return // another replica keeps the policies' status, and tells
	}
	key := gvr.Resource + "/" + u.GetNamespace() + "/" + u.GetName()
	if prev, ok := n.told.Load(key); ok && prev.(int64) == u.GetGeneration() {
		return
	}
	n.told.Store(key, u.GetGeneration())
	if k, ok := apiresources.KyvernoOnlyPolicyOf(gvr); ok {
		n.s.metrics.unevaluated.WithLabelValues(k.Kind).Inc()
		n.s.opts.Recorder.Eventf(u, corev1.EventTypeWarning, "PolicyNotEvaluated",
			"tally does not evaluate %s policies: %s not reported by tally's background scan", k.Kind, notReported[k.Source])
		logr.FromContextOrDiscard(ctx).Info("policy of a kind tally does not evaluate", "kind", k.Kind, "policy", u.GetNamespace()+"/"+u.GetName())
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

// watchUnevaluated watches the unevaluated kinds discovery serves, until
// ctx ends; the returned function waits for the watches to stop.
func (s *Scanner) watchUnevaluated(ctx context.Context) (stop func()) {
	sink := &unevaluatedSink{s: s}
	var sources []*watch.Source
	for _, gvr := range s.kinds.servedUnevaluatedKinds() {
		sources = append(sources, watch.Start(ctx, s.client, gvr, sink))
	}
	return func() {
		for _, src := range sources {
			src.Stop()
		}
	}
}
