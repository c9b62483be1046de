package scan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/engine"
)

// vapGVRs are the kinds watched for ValidatingAdmissionPolicies, mapGVRs
// for MutatingAdmissionPolicies (bindings first).
var (
	vapGVRs = []schema.GroupVersionResource{apiresources.ValidatingAdmissionPolicyBinding, apiresources.ValidatingAdmissionPolicy}
	mapGVRs = []schema.GroupVersionResource{apiresources.MutatingAdmissionPolicyBinding, apiresources.MutatingAdmissionPolicy}
)

// Labels that select what is reported: a ValidatingAdmissionPolicy is
// scanned only with LabelVAPReports "true"; a binding (or any policy) with
// LabelReportsDisabled is left out. MutatingAdmissionPolicies are scanned
// when Options.MutatingAdmissionPolicyReports is set (Kyverno's
// --mutatingAdmissionPolicyReports), all of them.
const (
	LabelVAPReports      = "reports.kyverno.io/enabled"
	LabelReportsDisabled = "reports.kyverno.io/disabled"
)

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
		return l[LabelVAPReports] == "true" && l[LabelReportsDisabled] == ""
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
	reported: func(u *unstructured.Unstructured) bool { return u.GetLabels()[LabelReportsDisabled] == "" },
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
// changes (from the control queue, one at a time): a policy is compiled
// with its bindings, so a binding's change recompiles the policy it names.
type admissionPolicySet struct {
	kind admissionPolicyKind
	// apply scans a policy as any other (Scanner.upsertPolicy);
	// forgetPolicy drops one and its results (Scanner.removePolicy).
	apply        func(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error
	forgetPolicy func(ctx context.Context, key string) error

	mu       sync.Mutex
	policies map[string]*unstructured.Unstructured
	bindings map[string]*unstructured.Unstructured
}

func newAdmissionPolicySet(kind admissionPolicyKind, apply func(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) error, forget func(context.Context, string) error) *admissionPolicySet {
	return &admissionPolicySet{kind: kind, apply: apply, forgetPolicy: forget,
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
		if policyNameOf(b) == policy && b.GetLabels()[LabelReportsDisabled] == "" {
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

// upsert applies a policy's change: a reported one is scanned; one that is
// not (or no longer) has no results.
func (as *admissionPolicySet) upsert(ctx context.Context, u *unstructured.Unstructured) error {
	if !as.kind.reported(u) {
		return as.remove(ctx, u.GetName())
	}
	return as.apply(ctx, as.kind.policy, u)
}

// remove forgets a policy and its results.
func (as *admissionPolicySet) remove(ctx context.Context, name string) error {
	as.forget(name)
	return as.forgetPolicy(ctx, apiresources.PolicyKey(as.kind.policy, "", name))
}

// upsertBinding applies a binding's change (nil: deleted): the policy it
// binds, or bound, is compiled again.
func (as *admissionPolicySet) upsertBinding(ctx context.Context, name string, u *unstructured.Unstructured) error {
	return as.recompile(ctx, as.setBinding(name, u))
}

// applyBindingList forgets the bindings not in a complete list.
func (as *admissionPolicySet) applyBindingList(ctx context.Context, objs []*unstructured.Unstructured) error {
	return as.recompile(ctx, as.dropMissingBindings(objs))
}

// recompile compiles scanned policies again (their bindings changed).
func (as *admissionPolicySet) recompile(ctx context.Context, policies []*unstructured.Unstructured) error {
	var errs []error
	for _, p := range policies {
		errs = append(errs, as.apply(ctx, as.kind.policy, p))
	}
	return errors.Join(errs...)
}

// paramCache serves the params of ValidatingAdmissionPolicy bindings from
// the API server, each (kind, namespace, name, selector) read at most once
// per paramTTL: a scan pass over many resources reads each once.
type paramCache struct {
	client dynamic.Interface
	kinds  *kindWatch
	clock  clock.PassiveClock

	mu      sync.Mutex
	entries map[string]paramEntry
}

type paramEntry struct {
	at     time.Time
	params []map[string]any
	err    error
}

// paramTTL is how long a params read is reused.
const paramTTL = 10 * time.Second

func newParamCache(client dynamic.Interface, kinds *kindWatch, clk clock.PassiveClock) *paramCache {
	return &paramCache{client: client, kinds: kinds, clock: clk, entries: map[string]paramEntry{}}
}

var _ engine.ParamSource = (*paramCache)(nil)

// Params implements engine.ParamSource: the named object (none if it does
// not exist), or the objects a selector picks.
func (pc *paramCache) Params(ctx context.Context, kind schema.GroupVersionKind, namespace, name string, selector *metav1.LabelSelector) ([]map[string]any, error) {
	sel := ""
	if selector != nil {
		s, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil {
			return nil, fmt.Errorf("paramRef.selector: %w", err)
		}
		sel = s.String()
	}
	key := kind.String() + "|" + namespace + "|" + name + "|" + sel
	now := pc.clock.Now()
	pc.mu.Lock()
	e, ok := pc.entries[key]
	pc.mu.Unlock()
	if ok && now.Sub(e.at) < paramTTL {
		return e.params, e.err
	}
	params, err := pc.read(ctx, kind, namespace, name, selector != nil, sel)
	pc.mu.Lock()
	for k, old := range pc.entries { // a few entries per binding: swept as they expire
		if now.Sub(old.at) >= paramTTL {
			delete(pc.entries, k)
		}
	}
	pc.entries[key] = paramEntry{at: now, params: params, err: err}
	pc.mu.Unlock()
	return params, err
}

func (pc *paramCache) read(ctx context.Context, kind schema.GroupVersionKind, namespace, name string, bySelector bool, sel string) ([]map[string]any, error) {
	gvr, err := pc.kinds.gvrOfKind(kind)
	if err != nil {
		return nil, fmt.Errorf("paramKind %w", err)
	}
	ri := pc.client.Resource(gvr)
	var r dynamic.ResourceInterface = ri
	if namespace != "" {
		r = ri.Namespace(namespace)
	}
	if !bySelector {
		obj, err := r.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("get %s %s: %w", gvr.Resource, name, err)
		}
		return []map[string]any{obj.Object}, nil
	}
	list, err := r.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list %s (%s): %w", gvr.Resource, sel, err)
	}
	out := make([]map[string]any, len(list.Items))
	for i := range list.Items {
		out[i] = list.Items[i].Object
	}
	return out, nil
}
