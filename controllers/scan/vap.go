package scan

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// Kubernetes' admission policies (catalog.AdmissionPolicy) are scanned
// through their bindings: a ValidatingAdmissionPolicy only with
// catalog.LabelReportsEnabled "true" (its descriptor's OptIn), a binding
// (or any policy) with report.LabelReportsDisabled is left out
// (report.ReportingDisabled). MutatingAdmissionPolicies are scanned when
// Options.MutatingAdmissionPolicyReports is set (Kyverno's
// --mutatingAdmissionPolicyReports), all of them.

// admissionPolicyGVRs are the kinds watched for an admission policy kind:
// its bindings first.
func admissionPolicyGVRs(k *catalog.Kind) []schema.GroupVersionResource {
	return []schema.GroupVersionResource{k.Binding, k.GVR}
}

// admissionPolicySet is what the scanner keeps of the admission policies of
// one kind it scans and of every binding of that kind, and applies their
// changes are applied by the policy reconciler (from the control queue,
// one at a time): a policy is compiled with its bindings, so a binding's
// change recompiles the policy it names.
type admissionPolicySet struct {
	kind *catalog.Kind

	mu       sync.Mutex
	policies map[string]*unstructured.Unstructured
	bindings map[string]*unstructured.Unstructured
}

func newAdmissionPolicySet(kind *catalog.Kind) *admissionPolicySet {
	return &admissionPolicySet{kind: kind,
		policies: map[string]*unstructured.Unstructured{}, bindings: map[string]*unstructured.Unstructured{}}
}

// read converts a policy, remembers it and compiles it with the bindings
// that name it.
func (as *admissionPolicySet) read(ctx context.Context, u *unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
	as.mu.Lock()
	as.policies[u.GetName()] = u
	bindings := as.bindingsOf(u.GetName())
	as.mu.Unlock()
	return as.kind.CompileBound(ctx, u, bindings)
}

// forget drops a policy that is no longer scanned.
func (as *admissionPolicySet) forget(name string) {
	as.mu.Lock()
	defer as.mu.Unlock()
	delete(as.policies, name)
}

// policyNameOf is the policy a binding names.
func policyNameOf(binding *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName")
	return name
}

// bindingsOf returns the reported bindings of a policy. The caller holds as.mu.
func (as *admissionPolicySet) bindingsOf(policy string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, b := range as.bindings {
		if policyNameOf(b) == policy && !report.ReportingDisabled(b.GetLabels()) {
			out = append(out, b)
		}
	}
	return out
}

// setBinding records a binding (nil u: deleted) and returns the scanned
// policies to recompile (the one it names, or named before).
func (as *admissionPolicySet) setBinding(name string, u *unstructured.Unstructured) []*unstructured.Unstructured {
	as.mu.Lock()
	defer as.mu.Unlock()
	names := map[string]bool{}
	if old := as.bindings[name]; old != nil {
		names[policyNameOf(old)] = true
	}
	if u != nil {
		as.bindings[name] = u
		names[policyNameOf(u)] = true
	} else {
		delete(as.bindings, name)
	}
	return as.policiesNamed(names)
}

// policiesNamed are the scanned policies of those names. The caller holds as.mu.
func (as *admissionPolicySet) policiesNamed(names map[string]bool) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for n := range names {
		if p := as.policies[n]; p != nil {
			out = append(out, p)
		}
	}
	return out
}

// dropMissingBindings forgets the bindings not in a complete list and
// returns the scanned policies they named.
func (as *admissionPolicySet) dropMissingBindings(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	present := map[string]bool{}
	for _, u := range objs {
		present[u.GetName()] = true
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	names := map[string]bool{}
	for n, b := range as.bindings {
		if !present[n] {
			names[policyNameOf(b)] = true
			delete(as.bindings, n)
		}
	}
	return as.policiesNamed(names)
}
