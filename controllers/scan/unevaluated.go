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

	"github.com/tally-dev/tally/controllers/watch"
)

// Policy kinds Kyverno evaluates and tally does not (R46): served where
// Kyverno's CRDs are installed (beside Kyverno), where Kyverno's reports
// controller would report them in the background and tally's scan, which
// replaces it, does not. Each such policy gets a Warning Event
// PolicyNotEvaluated, once per generation, from the replica that keeps the
// policies' status. tally writes no status on them: they are Kyverno's.
var unevaluatedKinds = []struct {
	resource, kind, what string
}{
	{"imagevalidatingpolicies", "ImageValidatingPolicy", "its image verification results (issue 42)"},
	{"namespacedimagevalidatingpolicies", "NamespacedImageValidatingPolicy", "its image verification results (issue 42)"},
	{"mutatingpolicies", "MutatingPolicy", "its background results (\"mutation is not applied\", issue 43)"},
	{"namespacedmutatingpolicies", "NamespacedMutatingPolicy", "its background results (\"mutation is not applied\", issue 43)"},
	{"generatingpolicies", "GeneratingPolicy", "nothing of its own (Kyverno's background controller reports it; tally merges those reports)"},
	{"namespacedgeneratingpolicies", "NamespacedGeneratingPolicy", "nothing of its own (Kyverno's background controller reports it; tally merges those reports)"},
}

// policyGroupVersions are the versions of policies.kyverno.io, newest
// first: a kind is watched in the first that serves it.
var policyGroupVersions = []string{"policies.kyverno.io/v1", "policies.kyverno.io/v1beta1", "policies.kyverno.io/v1alpha1"}

// servedUnevaluatedKinds are the unevaluated kinds discovery serves.
func (k *kindWatch) servedUnevaluatedKinds() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	found := map[string]bool{}
	for _, gv := range policyGroupVersions {
		list, err := k.disc.ServerResourcesForGroupVersion(gv)
		if err != nil || list == nil {
			continue
		}
		parsed, _ := schema.ParseGroupVersion(gv)
		for _, u := range unevaluatedKinds {
			if !found[u.resource] && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == u.resource }) {
				found[u.resource] = true
				out = append(out, parsed.WithResource(u.resource))
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
	for _, k := range unevaluatedKinds {
		if k.resource == gvr.Resource {
			n.s.metrics.unevaluated.WithLabelValues(k.kind).Inc()
			n.s.opts.Recorder.Eventf(u, corev1.EventTypeWarning, "PolicyNotEvaluated",
				"tally does not evaluate %s policies: %s not reported by tally's background scan", k.kind, k.what)
			logr.FromContextOrDiscard(ctx).Info("policy of a kind tally does not evaluate", "kind", k.kind, "policy", u.GetNamespace()+"/"+u.GetName())
		}
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
