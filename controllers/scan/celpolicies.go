package scan

import (
	"context"
	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
)

// celPolicyGVRs are the CEL kinds, in the order they are watched.
var celPolicyGVRs = []schema.GroupVersionResource{apiresources.CELPolicyException, apiresources.ValidatingPolicy, apiresources.NamespacedValidatingPolicy}

func isCELPolicy(gvr schema.GroupVersionResource) bool {
	return gvr == apiresources.ValidatingPolicy || gvr == apiresources.NamespacedValidatingPolicy
}

// celExceptionKey keeps CEL PolicyExceptions apart from kyverno.io ones in
// the store.
func celExceptionKey(namespace, name string) string { return "cel:" + namespace + "/" + name }

func (s *Scanner) upsertCELException(ctx context.Context, u *unstructured.Unstructured) error {
	name := celExceptionKey(u.GetNamespace(), u.GetName())
	var pe policiesv1.PolicyException
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pe)
	var ex *engine.CELException
	if err == nil {
		ex, err = engine.CompileCELException(&pe)
	}
	if err != nil {
		// An invalid exception is final until it is edited: nothing to retry.
		logr.FromContextOrDiscard(ctx).Error(err, "PolicyException could not be read; ignored", "name", name)
		return s.removeException(name) // its previous version no longer applies either
	}
	return s.storeException(name, s.celPoliciesReferred(pe.Spec.PolicyRefs), ex)
}

// celPoliciesReferred are the policies an exception names, as keys: a
// ValidatingPolicy's own ("ValidatingPolicy/x"); for a
// NamespacedValidatingPolicy, whose namespace the exception does not name
// (it is not compared), "NamespacedValidatingPolicy/x", which
// enqueuePolicies reads as that name in every namespace. Resolved when
// used, so that an exception created before its policies still rescans them.
func (s *Scanner) celPoliciesReferred(refs []policiesv1.PolicyRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		switch r.Kind {
		case policiesv1.KindValidatingPolicy, policiesv1.KindNamespacedValidatingPolicy:
			out = append(out, r.Kind+"/"+r.Name)
		}
	}
	return out
}
