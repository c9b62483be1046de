package scan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
)

// GVRs of the CEL policy kinds, watched when the API server serves them
// (tally's CRDs in standalone mode, Kyverno's beside it).
var (
	GVRValidatingPolicy           = policiesv1.GroupVersion.WithResource("validatingpolicies")
	GVRNamespacedValidatingPolicy = policiesv1.GroupVersion.WithResource("namespacedvalidatingpolicies")
	GVRCELPolicyException         = policiesv1.GroupVersion.WithResource("policyexceptions")
)

// celPolicyGVRs are the CEL kinds, in the order they are watched.
var celPolicyGVRs = []schema.GroupVersionResource{GVRCELPolicyException, GVRValidatingPolicy, GVRNamespacedValidatingPolicy}

func isCELPolicy(gvr schema.GroupVersionResource) bool {
	return gvr == GVRValidatingPolicy || gvr == GVRNamespacedValidatingPolicy
}

// servedCELKinds returns the CEL kinds the API server serves (none when it
// cannot tell: they are then not watched, and classic policies go on).
func (s *Scanner) servedCELKinds(ctx context.Context) []schema.GroupVersionResource {
	list, err := s.disc.ServerResourcesForGroupVersion(policiesv1.GroupVersion.String())
	if err != nil || list == nil {
		logr.FromContextOrDiscard(ctx).Info("CEL policy kinds not watched: "+policiesv1.GroupVersion.String()+" is not served", "reason", fmt.Sprint(err))
		return nil
	}
	var out []schema.GroupVersionResource
	for _, gvr := range celPolicyGVRs {
		if slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gvr.Resource }) {
			out = append(out, gvr)
		}
	}
	return out
}

// readCELPolicy converts and compiles a ValidatingPolicy or
// NamespacedValidatingPolicy.
func readCELPolicy(u *unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
	p, err := policiesv1.FromObject(u.Object)
	if err != nil {
		return nil, nil, err
	}
	compiled, err := engine.CompileValidatingPolicy(p)
	return p, compiled, err
}

// celExceptionKey keeps CEL PolicyExceptions apart from kyverno.io ones in
// the store.
func celExceptionKey(namespace, name string) string { return "cel:" + namespace + "/" + name }

func (s *Scanner) upsertCELException(u *unstructured.Unstructured) {
	name := celExceptionKey(u.GetNamespace(), u.GetName())
	var pe policiesv1.PolicyException
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pe)
	var ex *engine.CELException
	if err == nil {
		ex, err = engine.CompileCELException(&pe)
	}
	if err != nil {
		s.log().Error(err, "PolicyException could not be read; ignored", "name", name)
		s.removeException(name) // its previous version no longer applies either
		return
	}
	s.storeException(name, s.celPoliciesReferred(pe.Spec.PolicyRefs), ex)
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

// trackedKeys are the tracked policies a name of an exception's list
// stands for (see celPoliciesReferred). The caller holds s.mu.
func (s *Scanner) trackedKeys(name string) []string {
	if _, ok := s.policies[name]; ok {
		return []string{name}
	}
	prefix := policiesv1.KindNamespacedValidatingPolicy + "/"
	plain, ok := strings.CutPrefix(name, prefix)
	if !ok || strings.Contains(plain, "/") {
		return nil
	}
	var out []string
	for key := range s.policies {
		if strings.HasPrefix(key, prefix) && strings.HasSuffix(key, "/"+plain) {
			out = append(out, key)
		}
	}
	return out
}

// resolveResources maps the resource rules of a CEL policy to the GVRs to
// list: the preferred version of each group that serves a listed resource.
// Wildcard resources are not scanned in the background, as wildcard kinds
// are not.
func (s *Scanner) resolveResources(rules []engine.ResourceRule) ([]schema.GroupVersionResource, error) {
	lists, err := s.disc.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var out []schema.GroupVersionResource
	var errs []error
	for _, r := range rules {
		for _, res := range r.Resources {
			found := false
			if strings.Contains(res, "*") {
				errs = append(errs, fmt.Errorf("resource %q: wildcard resources are not scanned in the background", res))
				continue
			}
			if strings.Contains(res, "/") {
				continue // subresources exist only at admission
			}
			for _, list := range lists {
				gv, err := schema.ParseGroupVersion(list.GroupVersion)
				if err != nil || !listed(r.Groups, gv.Group) || !listed(r.Versions, gv.Version) {
					continue
				}
				for _, api := range list.APIResources {
					if api.Name == res && hasVerbs(api, "list", "watch") {
						gvr := gv.WithResource(api.Name)
						if !slices.Contains(out, gvr) {
							out = append(out, gvr)
						}
						found = true
					}
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("resource %q of groups %v, versions %v: not served by the API server", res, r.Groups, r.Versions))
			}
		}
	}
	return out, errors.Join(errs...)
}

func listed(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, "*")
}
