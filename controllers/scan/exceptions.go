package scan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

// exceptionSet applies the PolicyExceptions' changes (kyverno.io's and
// policies.kyverno.io's, from the control queue): each is compiled into
// the store, and the resources of the policies it names, before and after
// the change, are evaluated again.
type exceptionSet struct {
	store *memstore.Store
	// handlers queue every resource the policies an exception names can
	// match (enqueuePolicies).
	handlers *handlers
	// scope says which exceptions apply (--exception-namespace, Kyverno's
	// --exceptionNamespace: one from elsewhere is counted, and told on it
	// through recorder, the replica keeping the policies' status), and
	// where (--cluster-exception-namespaces).
	scope    engine.ExceptionScope
	metrics  *metrics
	recorder record.EventRecorder
}

// celExceptionKey keeps CEL PolicyExceptions apart from kyverno.io ones in
// the store.
func celExceptionKey(namespace, name string) string { return "cel:" + namespace + "/" + name }

// exceptionKey is the store's name of an exception object of gvr.
func exceptionKey(gvr schema.GroupVersionResource, namespace, name string) string {
	if gvr == apiresources.CELPolicyException {
		return celExceptionKey(namespace, name)
	}
	return namespace + "/" + name
}

// upsert applies a created or changed exception. One that cannot be read is
// final until it is edited (logged, its previous version forgotten); the
// error is a store write that failed.
func (es *exceptionSet) upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	name := exceptionKey(gvr, u.GetNamespace(), u.GetName())
	if !es.scope.Allowed(u.GetNamespace()) {
		logr.FromContextOrDiscard(ctx).Info("PolicyException outside --exception-namespace; ignored", "name", name, "exception-namespace", es.scope.Namespace)
		es.metrics.exceptionsIgnored.Inc()
		if es.recorder != nil {
			es.recorder.Eventf(u, corev1.EventTypeWarning, "PolicyExceptionIgnored",
				"tally takes PolicyExceptions only from namespace %s (--exception-namespace): this one does not apply", es.scope.Namespace)
		}
		return es.remove(name)
	}
	var compiled any
	var policies []string
	var err error
	if gvr == apiresources.CELPolicyException {
		var pe policiesv1.PolicyException
		if err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pe); err == nil {
			var x *engine.CELException
			if x, err = engine.CompileCELException(&pe); err == nil {
				x.Reach = es.scope.Reach(u.GetNamespace())
				compiled = x
			}
			policies = celPoliciesReferred(pe.Spec.PolicyRefs)
		}
	} else {
		var pe kyvernov2.PolicyException
		if err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pe); err == nil {
			var x *engine.Exception
			if x, err = engine.CompileException(&pe); err == nil {
				x.Reach = es.scope.Reach(u.GetNamespace())
				compiled = x
			}
			for _, e := range pe.Spec.Exceptions {
				policies = append(policies, e.PolicyName)
			}
		}
	}
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "PolicyException is invalid; ignored", "name", name)
		return es.remove(name) // its previous version no longer applies either
	}
	before, _ := es.policiesOf(name)
	if err := es.store.Write(func(w *memstore.WriteTxn) error {
		return w.PutException(&memstore.Exception{Name: name, Policies: policies, Compiled: compiled})
	}); err != nil {
		return fmt.Errorf("storing PolicyException %s: %w", name, err)
	}
	// The resources the previous version exempted must lose their skip.
	es.handlers.enqueuePolicies(union(before, policies))
	return nil
}

// celPoliciesReferred are the policies an exception names, as keys: a
// ValidatingPolicy's own ("ValidatingPolicy/x"); for a
// NamespacedValidatingPolicy, whose namespace the exception does not name
// (it is not compared), "NamespacedValidatingPolicy/x", which
// enqueuePolicies reads as that name in every namespace. Resolved when
// used, so that an exception created before its policies still rescans them.
func celPoliciesReferred(refs []policiesv1.PolicyRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		if k, ok := catalog.KindNamed(r.Kind); ok && k.Family == catalog.CEL {
			out = append(out, k.KeyPrefix+r.Name)
		}
	}
	return out
}

// policiesOf returns the policies a stored exception names; stored is false
// when it is not stored.
func (es *exceptionSet) policiesOf(name string) (policies []string, stored bool) {
	all, err := es.store.Read().Exceptions()
	if err != nil {
		return nil, false // a read of the in-memory store fails only on a schema bug
	}
	for _, e := range all {
		if e.Name == name {
			return e.Policies, true
		}
	}
	return nil, false
}

// remove forgets an exception (by its store name) and rescans what it
// exempted.
func (es *exceptionSet) remove(name string) error {
	policies, stored := es.policiesOf(name)
	if !stored {
		return nil // nothing it exempted
	}
	if err := es.store.Write(func(w *memstore.WriteTxn) error { return w.DeleteException(name) }); err != nil {
		return fmt.Errorf("forgetting PolicyException %s: %w", name, err)
	}
	es.handlers.enqueuePolicies(policies)
	return nil
}

// dropMissing forgets the exceptions of a kind that a complete list of it
// does not hold.
func (es *exceptionSet) dropMissing(gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) error {
	present := make(map[string]bool, len(objs))
	for _, u := range objs {
		present[exceptionKey(gvr, u.GetNamespace(), u.GetName())] = true
	}
	all, err := es.store.Read().Exceptions()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range all {
		if strings.HasPrefix(e.Name, "cel:") == (gvr == apiresources.CELPolicyException) && !present[e.Name] {
			errs = append(errs, es.remove(e.Name))
		}
	}
	return errors.Join(errs...)
}

// compiled returns the compiled kyverno.io PolicyExceptions.
func (es *exceptionSet) compiled() []*engine.Exception {
	all, err := es.store.Read().Exceptions()
	if err != nil {
		return nil
	}
	var out []*engine.Exception
	for _, e := range all {
		if ex, ok := e.Compiled.(*engine.Exception); ok {
			out = append(out, ex)
		}
	}
	return out
}

// union returns the names of a and b, once each.
func union(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, n := range append(slices.Clip(a), b...) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
