package admission

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
)

// admissionPolicy is a compiled policy with what answering and recording need.
type admissionPolicy struct {
	compiled *engine.Policy
	// name is the policy's key (catalog.Key); generation its
	// metadata.generation.
	name       string
	generation int64
	// ref refers to the policy object, for Events.
	ref *corev1.ObjectReference
	// gvr is the policy's kind (what a complete list of it can tell gone).
	gvr schema.GroupVersionResource
	// resourceVersion is the value of the policy label of the reports.
	resourceVersion string
	// labelKey is "cpol.kyverno.io/<name>" or "pol.kyverno.io/<name>" ("" when
	// the name does not fit a label key).
	labelKey string
	// failClosed is spec.failurePolicy: Fail (the default).
	failClosed bool
	// emitWarning is spec.emitWarning: the results of rules that do not deny
	// (Audit) are returned as admission warnings only when it is set, as
	// Kyverno does.
	emitWarning bool
	// matchConditions are spec.webhookConfiguration.matchConditions of a
	// ClusterPolicy or Policy (nil when none): Kyverno sets them on the
	// webhook it registers for the policy, so a request they do not match
	// never reaches the policy (handler.go).
	matchConditions *cel.Program
}

// snapshot is an immutable view of the policies and exceptions, swapped as a
// whole on every change so that requests read it without locks.
type snapshot struct {
	policies   []*admissionPolicy
	exceptions []*engine.Exception
}

// policySet keeps the compiled admission policies, the PolicyExceptions and
// the namespace labels in step with the cluster. It is a watch.Sink.
type policySet struct {
	onError  func()
	onPolicy func(schema.GroupVersionResource, *unstructured.Unstructured, error)
	// onChange is called after every new snapshot (nil: nothing).
	onChange func()
	// catalog compiles the policies (nil: unshared).
	catalog *catalog.Catalog

	mu         sync.Mutex
	policies   map[string]*admissionPolicy // by report name
	exceptions map[string]*engine.Exception
	listed     map[schema.GroupVersionResource]bool
	expected   map[schema.GroupVersionResource]bool

	snap       atomic.Pointer[snapshot]
	namespaces sync.Map // name -> map[string]string (labels)
	// exceptionScope is Options.Exceptions.
	exceptionScope engine.ExceptionScope
}

var _ watch.Sink = (*policySet)(nil)

func newPolicySet(onError func()) *policySet {
	ps := &policySet{onError: onError, policies: map[string]*admissionPolicy{},
		exceptions: map[string]*engine.Exception{}, listed: map[schema.GroupVersionResource]bool{},
		expected: map[schema.GroupVersionResource]bool{}}
	ps.snap.Store(&snapshot{})
	return ps
}

// current returns the policies and exceptions to evaluate a request with.
func (ps *policySet) current() *snapshot { return ps.snap.Load() }

// namespaceLabels returns the labels of a namespace (nil if unknown).
func (ps *policySet) namespaceLabels(name string) map[string]string {
	if v, ok := ps.namespaces.Load(name); ok {
		return v.(map[string]string)
	}
	return nil
}

// expect declares the kinds whose first list makes the set synced.
func (ps *policySet) expect(gvr schema.GroupVersionResource) {
	ps.mu.Lock()
	ps.expected[gvr] = true
	ps.mu.Unlock()
}

// synced reports whether every expected kind was listed once.
func (ps *policySet) synced() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for gvr := range ps.expected {
		if !ps.listed[gvr] {
			return false
		}
	}
	return len(ps.expected) > 0
}

// publish swaps in a new snapshot; the caller holds ps.mu.
func (ps *policySet) publish() {
	s := &snapshot{
		policies:   make([]*admissionPolicy, 0, len(ps.policies)),
		exceptions: make([]*engine.Exception, 0, len(ps.exceptions)),
	}
	for _, name := range slices.Sorted(maps.Keys(ps.policies)) {
		s.policies = append(s.policies, ps.policies[name])
	}
	for _, name := range slices.Sorted(maps.Keys(ps.exceptions)) {
		s.exceptions = append(s.exceptions, ps.exceptions[name])
	}
	ps.snap.Store(s)
	if ps.onChange != nil {
		ps.onChange()
	}
}

// admissionOf is what answering and recording need of a compiled
// policy; nil without error when its admission is off.
func admissionOf(p *catalog.Policy, u *unstructured.Unstructured) (*admissionPolicy, error) {
	compiled := p.Compiled
	ap := &admissionPolicy{compiled: compiled, gvr: p.GVR, resourceVersion: u.GetResourceVersion()}
	switch {
	case p.CEL != nil || p.Image != nil:
		if !compiled.AdmissionEnabled() {
			return nil, nil
		}
		// failurePolicy decides what a request whose evaluation did not
		// finish gets; Ignore lets it through.
		var fp *admissionregistrationv1.FailurePolicyType
		if p.Image != nil {
			fp = p.Image.Spec.FailurePolicy
		} else {
			fp = p.CEL.Spec.FailurePolicy
		}
		ap.failClosed = fp == nil || *fp != admissionregistrationv1.Ignore
		ap.emitWarning = compiled.Warns()
	default:
		spec := p.Spec
		if err := engine.Malformed(compiled); err != nil {
			return nil, err
		}
		// The scanner rejects such a policy as a whole (R06); the bridge
		// does the same so that both agree on which policies exist.
		if err := engine.ValidateBackground(spec); err != nil {
			return nil, err
		}
		if !spec.AdmissionEnabled() {
			return nil, nil
		}
		ap.failClosed = spec.FailurePolicy == nil || *spec.FailurePolicy != kyvernov1.Ignore
		ap.emitWarning = spec.EmitWarning != nil && *spec.EmitWarning
		if wc := spec.WebhookConfiguration; wc != nil && len(wc.MatchConditions) > 0 {
			prog, err := cel.Compile(cel.Spec{Mode: cel.ModeKyverno, MatchConditions: wc.MatchConditions})
			if err != nil {
				return nil, fmt.Errorf("spec.webhookConfiguration.matchConditions: %w", err)
			}
			ap.matchConditions = prog
		}
	}
	if k, ok := catalog.KindOf(p.GVR); ok && k.LabelPrefix != "" {
		if key := k.LabelPrefix + u.GetName(); len(validation.IsQualifiedName(key)) == 0 {
			ap.labelKey = key
		}
	}
	return ap, nil
}

// compilePolicy reads a policy object through the catalog; a nil policy
// with a nil error means the policy has admission off.
func (ps *policySet) compilePolicy(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (*admissionPolicy, error) {
	p, err := ps.catalog.Read(gvr, u)
	if err != nil {
		return nil, err
	}
	return admissionOf(p, u)
}

func (ps *policySet) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	switch gvr {
	case apiresources.Namespace:
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		ps.namespaces.Store(u.GetName(), labels)
	case apiresources.PolicyException:
		name := u.GetNamespace() + "/" + u.GetName()
		var pe kyvernov2.PolicyException
		err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pe)
		var ex *engine.Exception
		if err == nil {
			if ex, err = engine.CompileException(&pe); err == nil {
				ex.Reach = ps.exceptionScope.Reach(u.GetNamespace())
			}
		}
		allowed := ps.exceptionScope.Allowed(u.GetNamespace())
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if err != nil || !allowed {
			if err == nil {
				err = fmt.Errorf("not in --exception-namespace %s", ps.exceptionScope.Namespace)
			}
			logr.FromContextOrDiscard(ctx).Error(err, "PolicyException ignored at admission", "exception", name)
			delete(ps.exceptions, name)
		} else {
			ps.exceptions[name] = ex
		}
		ps.publish()
	default:
		k, ok := catalog.KindOf(gvr)
		if !ok || !k.Admission {
			return
		}
		name := k.Key(u.GetNamespace(), u.GetName())
		ap, err := ps.compilePolicy(gvr, u)
		if ps.onPolicy != nil {
			ps.onPolicy(gvr, u, err)
		}
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if err != nil {
			// The scanner reports it as an Event on the policy; here a log line.
			logr.FromContextOrDiscard(ctx).Error(err, "policy is invalid; skipped at admission", "policy", name)
			ps.onError()
			delete(ps.policies, name)
		} else if ap == nil {
			delete(ps.policies, name) // admission: false
		} else {
			ap.name, ap.generation = name, u.GetGeneration()
			ap.ref = &corev1.ObjectReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID()}
			ps.policies[name] = ap
		}
		ps.publish()
	}
}

func (ps *policySet) Remove(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	switch gvr {
	case apiresources.Namespace:
		ps.namespaces.Delete(u.GetName())
	case apiresources.PolicyException:
		ps.mu.Lock()
		delete(ps.exceptions, u.GetNamespace()+"/"+u.GetName())
		ps.publish()
		ps.mu.Unlock()
	default:
		k, ok := catalog.KindOf(gvr)
		if !ok || !k.Admission {
			return
		}
		ps.catalog.Forget(gvr, u.GetNamespace(), u.GetName())
		ps.mu.Lock()
		delete(ps.policies, k.Key(u.GetNamespace(), u.GetName()))
		ps.publish()
		ps.mu.Unlock()
	}
}

func (ps *policySet) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		ps.Upsert(ctx, gvr, u)
		switch gvr {
		case apiresources.Namespace:
			present[u.GetName()] = true
		case apiresources.PolicyException:
			present[u.GetNamespace()+"/"+u.GetName()] = true
		default:
			present[catalog.Key(gvr, u.GetNamespace(), u.GetName())] = true
		}
	}
	switch gvr {
	case apiresources.Namespace:
		ps.namespaces.Range(func(k, _ any) bool {
			if !present[k.(string)] {
				ps.namespaces.Delete(k)
			}
			return true
		})
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if gvr == apiresources.PolicyException {
		for name := range ps.exceptions {
			if !present[name] {
				delete(ps.exceptions, name)
			}
		}
	} else {
		ps.catalog.Retain(gvr, objs)
		for name, ap := range ps.policies {
			if ap.gvr == gvr && !present[name] {
				delete(ps.policies, name)
			}
		}
	}
	ps.publish()
}

func (ps *policySet) Listed(ctx context.Context, gvr schema.GroupVersionResource) {
	ps.mu.Lock()
	ps.listed[gvr] = true
	ps.mu.Unlock()
}
