package scan

import (
	"context"
	"sync"

	"github.com/go-logr/logr"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// vapGVRs are the kinds watched for ValidatingAdmissionPolicies, mapGVRs
// for MutatingAdmissionPolicies (bindings first).
var (
	vapGVRs = []schema.GroupVersionResource{apiresources.ValidatingAdmissionPolicyBinding, apiresources.ValidatingAdmissionPolicy}
	mapGVRs = []schema.GroupVersionResource{apiresources.MutatingAdmissionPolicyBinding, apiresources.MutatingAdmissionPolicy}
)

// Labels that select what is reported: a ValidatingAdmissionPolicy is
// scanned only with LabelVAPReports "true"; a binding (or any policy) with
// report.LabelReportsDisabled is left out (report.ReportingDisabled). MutatingAdmissionPolicies are scanned
// when Options.MutatingAdmissionPolicyReports is set (Kyverno's
// --mutatingAdmissionPolicyReports), all of them.
const LabelVAPReports = "reports.kyverno.io/enabled"

// admissionPolicyKind is a kind of Kubernetes admission policy the scanner
// reports through its bindings: ValidatingAdmissionPolicy (labelled
// LabelVAPReports) and MutatingAdmissionPolicy (with
// Options.MutatingAdmissionPolicyReports).
type admissionPolicyKind struct {
	policy, binding schema.GroupVersionResource
	// reported says whether a policy object is scanned.
	reported func(*unstructured.Unstructured) bool
	// compile converts a policy and compiles it with its bindings
	// (unreadable bindings are left out).
	compile func(ctx context.Context, policy *unstructured.Unstructured, bindings []*unstructured.Unstructured) (runtime.Object, *engine.Policy, error)
}

var validatingAdmissionPolicies = admissionPolicyKind{
	policy: apiresources.ValidatingAdmissionPolicy, binding: apiresources.ValidatingAdmissionPolicyBinding,
	reported: func(u *unstructured.Unstructured) bool {
		l := u.GetLabels()
		return l[LabelVAPReports] == "true" && !report.ReportingDisabled(l)
	},
	compile: func(ctx context.Context, u *unstructured.Unstructured, bindings []*unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			return nil, nil, err
		}
		p.APIVersion, p.Kind = admissionregistrationv1.SchemeGroupVersion.String(), "ValidatingAdmissionPolicy"
		compiled, err := engine.CompileValidatingAdmissionPolicy(&p, convertBindings[admissionregistrationv1.ValidatingAdmissionPolicyBinding](ctx, bindings))
		return &p, compiled, err
	},
}

var mutatingAdmissionPolicies = admissionPolicyKind{
	policy: apiresources.MutatingAdmissionPolicy, binding: apiresources.MutatingAdmissionPolicyBinding,
	reported: func(u *unstructured.Unstructured) bool { return !report.ReportingDisabled(u.GetLabels()) },
	compile: func(ctx context.Context, u *unstructured.Unstructured, bindings []*unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
		var p admissionregistrationv1beta1.MutatingAdmissionPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			return nil, nil, err
		}
		p.APIVersion, p.Kind = admissionregistrationv1beta1.SchemeGroupVersion.String(), "MutatingAdmissionPolicy"
		compiled, err := engine.CompileMutatingAdmissionPolicy(&p, convertBindings[admissionregistrationv1beta1.MutatingAdmissionPolicyBinding](ctx, bindings))
		return &p, compiled, err
	},
}

// convertBindings converts bindings; one that cannot be read binds nothing
// (it is final until it is edited: logged, nothing to retry).
func convertBindings[B any](ctx context.Context, objs []*unstructured.Unstructured) []*B {
	out := make([]*B, 0, len(objs))
	for _, u := range objs {
		b := new(B)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "admission policy binding could not be read; it binds nothing", "kind", u.GetKind(), "name", u.GetName())
			continue
		}
		out = append(out, b)
	}
	return out
}

// admissionPolicySet is what the scanner keeps of the admission policies of
// one kind it scans and of every binding of that kind, and applies their
// changes are applied by the policy reconciler (from the control queue,
// one at a time): a policy is compiled with its bindings, so a binding's
// change recompiles the policy it names.
type admissionPolicySet struct {
	kind admissionPolicyKind

	mu       sync.Mutex
	policies map[string]*unstructured.Unstructured
	bindings map[string]*unstructured.Unstructured
}

func newAdmissionPolicySet(kind admissionPolicyKind) *admissionPolicySet {
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
	return as.kind.compile(ctx, u, bindings)
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
