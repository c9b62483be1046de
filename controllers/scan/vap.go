package scan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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

// vapGVRs are the kinds watched for ValidatingAdmissionPolicies.
var vapGVRs = []schema.GroupVersionResource{apiresources.ValidatingAdmissionPolicyBinding, apiresources.ValidatingAdmissionPolicy}

// Labels that select what is reported: a ValidatingAdmissionPolicy is
// scanned only with LabelVAPReports "true"; a binding (or any policy) with
// LabelReportsDisabled is left out.
const (
	LabelVAPReports      = "reports.kyverno.io/enabled"
	LabelReportsDisabled = "reports.kyverno.io/disabled"
)

// vapSet is what the scanner keeps of the ValidatingAdmissionPolicies it
// scans and of every binding, and applies their changes (from the control
// queue, one at a time): a policy is compiled with its bindings, so a
// binding's change recompiles the policy it names.
type vapSet struct {
	// apply scans a policy as any other (Scanner.upsertPolicy);
	// forgetPolicy drops one and its results (Scanner.removePolicy).
	apply        func(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error
	forgetPolicy func(ctx context.Context, key string) error

	mu       sync.Mutex
	policies map[string]*admissionregistrationv1.ValidatingAdmissionPolicy
	bindings map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

func newVAPSet(apply func(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) error, forget func(context.Context, string) error) *vapSet {
	return &vapSet{apply: apply, forgetPolicy: forget, policies: map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{},
		bindings: map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}}
}

// reported says whether a ValidatingAdmissionPolicy is scanned.
func reported(u *unstructured.Unstructured) bool {
	l := u.GetLabels()
	return l[LabelVAPReports] == "true" && l[LabelReportsDisabled] == ""
}

// readVAP converts a ValidatingAdmissionPolicy, remembers it and compiles
// it with the bindings that name it.
func (vs *vapSet) read(u *unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
	var p admissionregistrationv1.ValidatingAdmissionPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, nil, err
	}
	p.APIVersion, p.Kind = admissionregistrationv1.SchemeGroupVersion.String(), "ValidatingAdmissionPolicy"
	vs.mu.Lock()
	vs.policies[p.Name] = &p
	bindings := vs.bindingsOf(p.Name)
	vs.mu.Unlock()
	compiled, err := engine.CompileValidatingAdmissionPolicy(&p, bindings)
	return &p, compiled, err
}

// forget drops a policy that is no longer scanned.
func (vs *vapSet) forget(name string) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	delete(vs.policies, name)
}

// bindingsOf returns the reported bindings of a policy. The caller holds vs.mu.
func (vs *vapSet) bindingsOf(policy string) []*admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	var out []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, b := range vs.bindings {
		if b.Spec.PolicyName == policy && b.Labels[LabelReportsDisabled] == "" {
			out = append(out, b)
		}
	}
	return out
}

// setBinding records a binding (nil u: deleted) and returns the scanned
// policy to recompile (the one it names, or named before), if any.
func (vs *vapSet) setBinding(name string, u *unstructured.Unstructured) (affected []*admissionregistrationv1.ValidatingAdmissionPolicy, err error) {
	var b *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if u != nil {
		b = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		if err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
			b = nil // an unreadable binding binds nothing
		}
	}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	names := map[string]bool{}
	if old := vs.bindings[name]; old != nil {
		names[old.Spec.PolicyName] = true
	}
	if b != nil {
		vs.bindings[name] = b
		names[b.Spec.PolicyName] = true
	} else {
		delete(vs.bindings, name)
	}
	for n := range names {
		if p := vs.policies[n]; p != nil {
			affected = append(affected, p)
		}
	}
	return affected, err
}

// dropMissingBindings forgets the bindings not in a complete list and
// returns the scanned policies they named.
func (vs *vapSet) dropMissingBindings(objs []*unstructured.Unstructured) []*admissionregistrationv1.ValidatingAdmissionPolicy {
	present := map[string]bool{}
	for _, u := range objs {
		present[u.GetName()] = true
	}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	names := map[string]bool{}
	for n, b := range vs.bindings {
		if !present[n] {
			names[b.Spec.PolicyName] = true
			delete(vs.bindings, n)
		}
	}
	var out []*admissionregistrationv1.ValidatingAdmissionPolicy
	for n := range names {
		if p := vs.policies[n]; p != nil {
			out = append(out, p)
		}
	}
	return out
}

// upsert applies a ValidatingAdmissionPolicy's change: a labelled one is
// scanned; an unlabelled one (or one whose label went) has no results.
func (vs *vapSet) upsert(ctx context.Context, u *unstructured.Unstructured) error {
	if !reported(u) {
		return vs.remove(ctx, u.GetName())
	}
	return vs.apply(ctx, apiresources.ValidatingAdmissionPolicy, u)
}

// remove forgets a policy and its results.
func (vs *vapSet) remove(ctx context.Context, name string) error {
	vs.forget(name)
	return vs.forgetPolicy(ctx, apiresources.PolicyKey(apiresources.ValidatingAdmissionPolicy, "", name))
}

// upsertBinding applies a binding's change (nil: deleted): the policy it
// binds, or bound, is compiled again.
func (vs *vapSet) upsertBinding(ctx context.Context, name string, u *unstructured.Unstructured) error {
	affected, err := vs.setBinding(name, u)
	if err != nil {
		// An unreadable binding is final until it is edited: nothing to retry.
		logr.FromContextOrDiscard(ctx).Error(err, "ValidatingAdmissionPolicyBinding could not be read; it binds nothing", "name", name)
	}
	return vs.recompile(ctx, affected)
}

// applyBindingList forgets the bindings not in a complete list.
func (vs *vapSet) applyBindingList(ctx context.Context, objs []*unstructured.Unstructured) error {
	return vs.recompile(ctx, vs.dropMissingBindings(objs))
}

// recompile compiles scanned policies again (their bindings changed).
func (vs *vapSet) recompile(ctx context.Context, policies []*admissionregistrationv1.ValidatingAdmissionPolicy) error {
	var errs []error
	for _, p := range policies {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			continue // it was converted from unstructured: cannot fail
		}
		errs = append(errs, vs.apply(ctx, apiresources.ValidatingAdmissionPolicy, &unstructured.Unstructured{Object: obj}))
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
