package merge

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// Policy kinds only Kyverno evaluates (R45, catalog.KyvernoOnly).
// Beside Kyverno their results come through Kyverno's admission and
// background controller reports: the merger reads these policies (where
// served) so that their results are kept while the policy is, and go with
// it, as Kyverno's reports controller keeps them. tally's scan never
// reports them, so they are taken as admission-only policies: nothing of a
// scan makes them stale.

// servedKyvernoOnlyKinds are those kinds served, each in its newest served
// version.
func (m *Merger) servedKyvernoOnlyKinds(ctx context.Context) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, k := range catalog.Kinds(catalog.KyvernoOnly) {
		for _, v := range k.Versions {
			gvr := schema.GroupVersionResource{Group: k.GVR.Group, Version: v, Resource: k.GVR.Resource}
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
	key, _ := policyKeyOf(gvr, u)
	return key, PolicyInfo{
		Admission:       true,
		AnyRule:         true,
		ReportsDisabled: report.ReportingDisabled(u.GetLabels()),
		Scored:          u.GetAnnotations()[engine.AnnotationScored] != "false",
		Category:        u.GetAnnotations()[engine.AnnotationCategory],
		Severity:        u.GetAnnotations()[engine.AnnotationSeverity],
	}
}
