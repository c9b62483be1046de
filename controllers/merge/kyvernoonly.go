package merge

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/engine"
)

// Policy kinds only Kyverno evaluates (R45). Beside Kyverno their results
// come through Kyverno's admission and background controller reports: the
// merger reads these policies (where served) so that their results are
// kept while the policy is, and go with it, as Kyverno's reports
// controller keeps them. tally's scan never reports them, so they are
// taken as admission-only policies: nothing of a scan makes them stale.
var kyvernoOnlyKinds = []struct {
	resource   string
	source     string
	namespaced bool
}{
	{"imagevalidatingpolicies", "KyvernoImageValidatingPolicy", false},
	{"namespacedimagevalidatingpolicies", "KyvernoImageValidatingPolicy", true},
	{"mutatingpolicies", "KyvernoMutatingPolicy", false},
	{"namespacedmutatingpolicies", "KyvernoMutatingPolicy", true},
	{"generatingpolicies", "KyvernoGeneratingPolicy", false},
	{"namespacedgeneratingpolicies", "KyvernoGeneratingPolicy", true},
}

// kyvernoOnlyVersions are the versions of policies.kyverno.io tried, newest
// first: each kind is read in the first that serves it.
var kyvernoOnlyVersions = []string{"v1", "v1beta1", "v1alpha1"}

// kyvernoOnlyKind finds a kind of kyvernoOnlyKinds.
func kyvernoOnlyKind(gvr schema.GroupVersionResource) (source string, namespaced, ok bool) {
	if gvr.Group != "policies.kyverno.io" {
		return "", false, false
	}
	for _, k := range kyvernoOnlyKinds {
		if k.resource == gvr.Resource {
			return k.source, k.namespaced, true
		}
	}
	return "", false, false
}

// servedKyvernoOnlyKinds are the kinds of kyvernoOnlyKinds served, each in
// its newest served version.
func (m *Merger) servedKyvernoOnlyKinds(ctx context.Context) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, k := range kyvernoOnlyKinds {
		for _, v := range kyvernoOnlyVersions {
			gvr := schema.GroupVersionResource{Group: "policies.kyverno.io", Version: v, Resource: k.resource}
			if served := m.servedKinds(ctx, gvr); len(served) > 0 {
				out = append(out, gvr)
				break
			}
		}
	}
	return out
}

// kyvernoOnlyInfo is what the merge needs of such a policy.
func kyvernoOnlyInfo(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (string, PolicyInfo) {
	source, namespaced, _ := kyvernoOnlyKind(gvr)
	name := u.GetName()
	if namespaced {
		name = u.GetNamespace() + "/" + name
	}
	return PolicyKey(source, name), PolicyInfo{
		Admission:       true,
		AnyRule:         true,
		ReportsDisabled: u.GetLabels()[labelReportsDisable] == "true",
		Scored:          u.GetAnnotations()[engine.AnnotationScored] != "false",
		Category:        u.GetAnnotations()[engine.AnnotationCategory],
		Severity:        u.GetAnnotations()[engine.AnnotationSeverity],
	}
}
