package merge

import (
	"fmt"

	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func isPolicy(gvr schema.GroupVersionResource) bool {
	_, ok := catalog.KindOf(gvr)
	return ok
}

// policyKeyOf is the key of a policy object in Input.Policies, and the
// policy name its results carry.
func policyKeyOf(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (key, name string) {
	k, ok := catalog.KindOf(gvr)
	if !ok {
		return u.GetName(), u.GetName()
	}
	name = k.ReportName(u.GetNamespace(), u.GetName())
	return PolicyKey(k.Source, name), name
}

// policyInfo reads what the merge needs of a policy, autogen rules
// included; key is its key in Input.Policies (PolicyKey).
func policyInfo(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (string, PolicyInfo, error) {
	k, ok := catalog.KindOf(gvr)
	if !ok {
		return "", PolicyInfo{}, fmt.Errorf("%s is not a policy kind", gvr.String())
	}
	switch k.Family {
	case catalog.KyvernoOnly:
		key, info := kyvernoOnlyInfo(gvr, u)
		return key, info, nil
	case catalog.CEL:
		return celPolicyInfo(k, gvr, u)
	case catalog.AdmissionPolicy:
		key, _ := policyKeyOf(gvr, u)
		return key, PolicyInfo{
			Background: true,
			AnyRule:    true,
			// An unlabelled ValidatingAdmissionPolicy is not reported (its
			// results, from before the label went, are dropped).
			ReportsDisabled: !k.Reported(u.GetLabels()),
			Scored:          u.GetAnnotations()[engine.AnnotationScored] != "false",
			Category:        u.GetAnnotations()[engine.AnnotationCategory],
			Severity:        u.GetAnnotations()[engine.AnnotationSeverity],
		}, nil
	}
	// Compiled for its rules' names, autogen rules included.
	p, err := catalog.Read(gvr, u)
	if err != nil {
		return "", PolicyInfo{}, err
	}
	compiled, spec := p.Compiled, p.Spec
	info := PolicyInfo{
		Background:      spec.BackgroundEnabled(),
		Admission:       spec.AdmissionEnabled(),
		Rules:           map[string]bool{},
		ReportsDisabled: report.ReportingDisabled(u.GetLabels()),
		Scored:          compiled.Scored,
		Category:        compiled.Category,
		Severity:        compiled.Severity,
	}
	for _, r := range compiled.Rules {
		info.Rules[r.Name] = true
		if r.VerifiesImages() {
			if info.OtherHandler == nil {
				info.OtherHandler = map[string]bool{}
			}
			info.OtherHandler[r.Name] = true
		}
	}
	for _, r := range compiled.LeftOut {
		if info.KyvernoOnly == nil {
			info.KyvernoOnly = map[string]bool{}
		}
		for _, name := range []string{r.Name, "autogen-" + r.Name, "autogen-cronjob-" + r.Name} {
			info.KyvernoOnly[name] = true
		}
	}
	return compiled.Name, info, nil
}

// celPolicyInfo reads what the merge needs of a ValidatingPolicy,
// MutatingPolicy or their namespaced kinds: their results have no rule to
// check.
func celPolicyInfo(k *catalog.Kind, gvr schema.GroupVersionResource, u *unstructured.Unstructured) (string, PolicyInfo, error) {
	info := PolicyInfo{
		AnyRule:         true,
		ReportsDisabled: report.ReportingDisabled(u.GetLabels()),
		Scored:          u.GetAnnotations()[engine.AnnotationScored] != "false",
		Category:        u.GetAnnotations()[engine.AnnotationCategory],
		Severity:        u.GetAnnotations()[engine.AnnotationSeverity],
	}
	var err error
	if info.Background, info.Admission, err = k.Modes(u); err != nil {
		return "", PolicyInfo{}, err
	}
	key, _ := policyKeyOf(gvr, u)
	return key, info, nil
}

// Policy kinds only Kyverno evaluates (R45, catalog.KyvernoOnly).
// Beside Kyverno their results come through Kyverno's admission and
// background controller reports: the merger reads these policies (where
// served) so that their results are kept while the policy is, and go with
// it, as Kyverno's reports controller keeps them. tally's scan never
// reports them, so they are taken as admission-only policies: nothing of a
// scan makes them stale.

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
