package catalog

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// Family groups the policy kinds the controllers handle alike.
type Family int

const (
	// Classic: kyverno.io's ClusterPolicy and Policy, which read
	// Namespaces and PolicyExceptions beside them.
	Classic Family = iota + 1
	// CEL: the policies.kyverno.io kinds tally evaluates, each compiled
	// alone.
	CEL
	// AdmissionPolicy: Kubernetes' Validating- and MutatingAdmissionPolicy,
	// each compiled with the bindings that name it.
	AdmissionPolicy
	// KyvernoOnly: policies.kyverno.io kinds Kyverno evaluates and tally
	// does not (R45, R46); served where Kyverno's CRDs are installed.
	KyvernoOnly
)

// Kind describes one policy kind: what each controller needs to know of
// it. The controllers ask the descriptor (KindOf, Kinds) and never name a
// policy kind themselves; a new kind is a descriptor here plus its engine
// functions.
type Kind struct {
	// GVR is the kind's resource in the version tally reads it in (a
	// KyvernoOnly kind's newest; Versions are where else it is looked for).
	GVR schema.GroupVersionResource
	// Versions are the versions the kind is looked for in, newest first:
	// it is read in the first one served.
	Versions []string
	// Name is the kind's name ("ValidatingPolicy").
	Name       string
	Namespaced bool
	Family     Family
	// Source is the source of its results in the reports.
	Source string
	// KeyPrefix starts the key of its policies in every controller (Key).
	KeyPrefix string
	// LabelPrefix starts the label an admission report carries per policy
	// evaluated at admission (the policy's name after it, its
	// resourceVersion the value), as Kyverno labels them.
	LabelPrefix string
	// Admission says whether tally's admission bridge evaluates its
	// policies (a MutatingPolicy, a GeneratingPolicy and the Kubernetes
	// admission policies are left to their own admission controllers).
	Admission bool
	// Binding is the kind of an AdmissionPolicy's bindings.
	Binding schema.GroupVersionResource
	// OptIn is the label a policy of the kind must have, "true", to be
	// reported (a ValidatingAdmissionPolicy's reports.kyverno.io/enabled);
	// empty: every policy is, unless report.LabelReportsDisabled.
	OptIn string
	// NotReported says, of a KyvernoOnly kind, what tally's background
	// scan does not report of it.
	NotReported string
	// ReadyConditions: the scanner writes Kyverno's conditions of a loaded
	// ValidatingPolicy (WebhookConfigured, RBACPermissionsGranted) on its
	// policies beside Ready.
	ReadyConditions bool
	// ReportsFlag names the tally-scanner flag its reports need
	// (--mutating-admission-policy-reports); empty: always reported.
	ReportsFlag string

	// read converts and compiles a policy of a kind compiled alone;
	// compileBound one of an AdmissionPolicy kind with its bindings.
	read         func(u *unstructured.Unstructured) (*Policy, error)
	compileBound func(ctx context.Context, u *unstructured.Unstructured, bindings []*unstructured.Unstructured) (runtime.Object, *engine.Policy, error)
	// modes reads whether a CEL policy is evaluated in the background and
	// at admission (by Kyverno's webhook, for a MutatingPolicy), without
	// compiling it.
	modes func(u *unstructured.Unstructured) (background, admission bool, err error)
}

// LabelReportsEnabled on a ValidatingAdmissionPolicy, "true", has it
// reported (Kind.OptIn).
const LabelReportsEnabled = "reports.kyverno.io/enabled"

// kyvernoOnlyNotReported is what tally's scan leaves out of a
// GeneratingPolicy.
const kyvernoOnlyNotReported = "nothing of its own (Kyverno's background controller reports it; tally merges those reports)"

// kyvernoOnlyVersions are the versions of policies.kyverno.io a KyvernoOnly
// kind is looked for in, newest first.
var kyvernoOnlyVersions = []string{"v1", "v1beta1", "v1alpha1"}

// The table: every policy kind tally knows, in the order they are watched.
var kinds = []*Kind{
	{GVR: apiresources.ClusterPolicy, Name: "ClusterPolicy", Family: Classic, Source: report.Source, Admission: true,
		LabelPrefix: "cpol.kyverno.io/", read: readClassic(false)},
	{GVR: apiresources.Policy, Name: "Policy", Namespaced: true, Family: Classic, Source: report.Source, Admission: true,
		LabelPrefix: "pol.kyverno.io/", read: readClassic(true)},
	{GVR: apiresources.ValidatingPolicy, Name: policiesv1.KindValidatingPolicy, Family: CEL, Source: engine.SourceValidatingPolicy, Admission: true,
		LabelPrefix: "vpol.kyverno.io/", ReadyConditions: true, read: readValidating, modes: validatingModes},
	{GVR: apiresources.NamespacedValidatingPolicy, Name: policiesv1.KindNamespacedValidatingPolicy, Namespaced: true, Family: CEL,
		Source: engine.SourceValidatingPolicy, Admission: true, LabelPrefix: "vpol.kyverno.io/", ReadyConditions: true, read: readValidating, modes: validatingModes},
	{GVR: apiresources.MutatingPolicy, Name: policiesv1.KindMutatingPolicy, Family: CEL, Source: engine.SourceMutatingPolicy,
		read: readMutating, modes: mutatingModes},
	{GVR: apiresources.NamespacedMutatingPolicy, Name: policiesv1.KindNamespacedMutatingPolicy, Namespaced: true, Family: CEL,
		Source: engine.SourceMutatingPolicy, read: readMutating, modes: mutatingModes},
	{GVR: apiresources.ImageValidatingPolicy, Name: policiesv1.KindImageValidatingPolicy, Family: CEL, Source: engine.SourceImageValidatingPolicy,
		Admission: true, LabelPrefix: "ivpol.kyverno.io/", read: readImageValidating, modes: imageValidatingModes},
	{GVR: apiresources.NamespacedImageValidatingPolicy, Name: policiesv1.KindNamespacedImageValidatingPolicy, Namespaced: true, Family: CEL,
		Source: engine.SourceImageValidatingPolicy, Admission: true, LabelPrefix: "ivpol.kyverno.io/", read: readImageValidating, modes: imageValidatingModes},
	{GVR: apiresources.ValidatingAdmissionPolicy, Name: "ValidatingAdmissionPolicy", Family: AdmissionPolicy,
		Source: engine.SourceValidatingAdmissionPolicy, Binding: apiresources.ValidatingAdmissionPolicyBinding, OptIn: LabelReportsEnabled,
		compileBound: compileWithBindings[admissionregistrationv1.ValidatingAdmissionPolicy, admissionregistrationv1.ValidatingAdmissionPolicyBinding](
			admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"), engine.CompileValidatingAdmissionPolicy)},
	{GVR: apiresources.MutatingAdmissionPolicy, Name: "MutatingAdmissionPolicy", Family: AdmissionPolicy,
		Source: engine.SourceMutatingAdmissionPolicy, Binding: apiresources.MutatingAdmissionPolicyBinding,
		ReportsFlag: "mutating-admission-policy-reports", compileBound: compileWithBindings[admissionregistrationv1beta1.MutatingAdmissionPolicy, admissionregistrationv1beta1.MutatingAdmissionPolicyBinding](
			admissionregistrationv1beta1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy"), engine.CompileMutatingAdmissionPolicy)},
	{GVR: policiesv1.GroupVersion.WithResource("generatingpolicies"), Versions: kyvernoOnlyVersions, Name: "GeneratingPolicy",
		Family: KyvernoOnly, Source: policiesv1.SourceGeneratingPolicy, NotReported: kyvernoOnlyNotReported},
	{GVR: policiesv1.GroupVersion.WithResource("namespacedgeneratingpolicies"), Versions: kyvernoOnlyVersions, Name: "NamespacedGeneratingPolicy",
		Namespaced: true, Family: KyvernoOnly, Source: policiesv1.SourceGeneratingPolicy, NotReported: kyvernoOnlyNotReported},
}

func init() {
	for _, k := range kinds {
		if k.KeyPrefix == "" && k.Family != Classic {
			k.KeyPrefix = k.Name + "/"
		}
		if len(k.Versions) == 0 {
			k.Versions = []string{k.GVR.Version}
		}
	}
}

// Kinds are the descriptors of the given families (every kind when none
// is given), in the table's order.
func Kinds(families ...Family) []*Kind {
	var out []*Kind
	for _, k := range kinds {
		if len(families) == 0 || slices.Contains(families, k.Family) {
			out = append(out, k)
		}
	}
	return out
}

// GVRs are the resources of the kinds of the given families that keep
// (keep nil: all of them).
func GVRs(keep func(*Kind) bool, families ...Family) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, k := range Kinds(families...) {
		if keep == nil || keep(k) {
			out = append(out, k.GVR)
		}
	}
	return out
}

// KindOf finds gvr's descriptor. A KyvernoOnly kind is found in each of
// its Versions.
func KindOf(gvr schema.GroupVersionResource) (*Kind, bool) {
	for _, k := range kinds {
		if k.GVR == gvr || (k.GVR.Group == gvr.Group && k.GVR.Resource == gvr.Resource && slices.Contains(k.Versions, gvr.Version)) {
			return k, true
		}
	}
	return nil, false
}

// KindNamed finds the descriptor of the kind of that name
// ("ValidatingPolicy"), as a PolicyException's policyRefs name it.
func KindNamed(name string) (*Kind, bool) {
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// KindOfSource finds the descriptor of the first kind whose results carry
// source.
func KindOfSource(source string) (*Kind, bool) {
	for _, k := range kinds {
		if k.Source == source {
			return k, true
		}
	}
	return nil, false
}

// ReportName is the name a policy's results carry: "namespace/name" for a
// namespaced kind's.
func (k *Kind) ReportName(namespace, name string) string {
	if k.Namespaced {
		return namespace + "/" + name
	}
	return name
}

// Key is a policy's key in every controller: its report name, after its
// kind's KeyPrefix ("x" for a ClusterPolicy, "ns/x" for a Policy,
// "ValidatingPolicy/x", "NamespacedValidatingPolicy/ns/x",
// "ValidatingAdmissionPolicy/x"). A namespace is never capitalized, so no
// key of one kind is another's.
func (k *Kind) Key(namespace, name string) string {
	return k.KeyPrefix + k.ReportName(namespace, name)
}

// Key is the key of a policy of gvr's kind (Kind.Key); of an unknown kind,
// its name.
func Key(gvr schema.GroupVersionResource, namespace, name string) string {
	if k, ok := KindOf(gvr); ok {
		return k.Key(namespace, name)
	}
	return name
}

// Reported says whether a policy of the kind, with these labels, has its
// results reported: not report.LabelReportsDisabled, and OptIn "true"
// where the kind has one.
func (k *Kind) Reported(labels map[string]string) bool {
	return (k.OptIn == "" || labels[k.OptIn] == "true") && !report.ReportingDisabled(labels)
}

// Compiled says whether the Catalog reads objects of the kind (the kinds
// compiled alone).
func (k *Kind) Compiled() bool { return k.read != nil }

// CompileBound converts and compiles a policy of an AdmissionPolicy kind
// with the bindings that name it (a binding that cannot be read binds
// nothing).
func (k *Kind) CompileBound(ctx context.Context, u *unstructured.Unstructured, bindings []*unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
	return k.compileBound(ctx, u, bindings)
}

// Modes says whether a policy of a CEL kind is evaluated in the background
// and at admission, read from the object without compiling it.
func (k *Kind) Modes(u *unstructured.Unstructured) (background, admission bool, err error) {
	if k.modes == nil {
		return false, false, fmt.Errorf("%s: no modes to read", k.Name)
	}
	return k.modes(u)
}

func validatingModes(u *unstructured.Unstructured) (bool, bool, error) {
	vp, err := policiesv1.FromObject(u.Object)
	if err != nil {
		return false, false, err
	}
	return vp.Spec.BackgroundEnabled(), vp.Spec.AdmissionEnabled(), nil
}

func mutatingModes(u *unstructured.Unstructured) (bool, bool, error) {
	mp, err := policiesv1.MutatingFromObject(u.Object)
	if err != nil {
		return false, false, err
	}
	// Kyverno's webhook reports it at admission (beside Kyverno).
	return mp.Spec.BackgroundEnabled(), mp.Spec.Evaluation == nil || mp.Spec.Evaluation.Admission.On(), nil
}

func imageValidatingModes(u *unstructured.Unstructured) (bool, bool, error) {
	ip, err := policiesv1.ImageValidatingFromObject(u.Object)
	if err != nil {
		return false, false, err
	}
	return ip.Spec.BackgroundEnabled(), ip.Spec.AdmissionEnabled(), nil
}

func readClassic(namespaced bool) func(u *unstructured.Unstructured) (*Policy, error) {
	return func(u *unstructured.Unstructured) (*Policy, error) {
		p := &Policy{}
		var err error
		if namespaced {
			var pol kyvernov1.Policy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pol); err != nil {
				return nil, err
			}
			pol.APIVersion, pol.Kind = kyvernov1.GroupVersion.String(), "Policy"
			verifyDigestByDefault(&pol.Spec)
			p.Object, p.Spec = &pol, &pol.Spec
			p.Compiled, err = engine.CompilePolicy(&pol)
			return p, err
		}
		var pol kyvernov1.ClusterPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pol); err != nil {
			return nil, err
		}
		pol.APIVersion, pol.Kind = kyvernov1.GroupVersion.String(), "ClusterPolicy"
		verifyDigestByDefault(&pol.Spec)
		p.Object, p.Spec = &pol, &pol.Spec
		p.Compiled, err = engine.CompileClusterPolicy(&pol)
		return p, err
	}
}

func readValidating(u *unstructured.Unstructured) (*Policy, error) {
	vp, err := policiesv1.FromObject(u.Object)
	if err != nil {
		return nil, err
	}
	p := &Policy{Object: vp, CEL: vp}
	p.Compiled, err = engine.CompileValidatingPolicy(vp)
	return p, err
}

func readMutating(u *unstructured.Unstructured) (*Policy, error) {
	mp, err := policiesv1.MutatingFromObject(u.Object)
	if err != nil {
		return nil, err
	}
	p := &Policy{Object: mp, Mutating: mp}
	p.Compiled, err = engine.CompileMutatingPolicy(mp)
	return p, err
}

func readImageValidating(u *unstructured.Unstructured) (*Policy, error) {
	ivp, err := policiesv1.ImageValidatingFromObject(u.Object)
	if err != nil {
		return nil, err
	}
	p := &Policy{Object: ivp, Image: ivp}
	p.Compiled, err = engine.CompileImageValidatingPolicy(ivp)
	return p, err
}

// compileWithBindings makes the compile function of an admission policy
// kind: the policy converted into its type P (kind gvk), compiled with its
// bindings of type B.
func compileWithBindings[P, B any, PP interface {
	*P
	runtime.Object
}](gvk schema.GroupVersionKind, compile func(PP, []*B) (*engine.Policy, error)) func(context.Context, *unstructured.Unstructured, []*unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
	return func(ctx context.Context, u *unstructured.Unstructured, bindings []*unstructured.Unstructured) (runtime.Object, *engine.Policy, error) {
		p := PP(new(P))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			return nil, nil, err
		}
		p.GetObjectKind().SetGroupVersionKind(gvk)
		compiled, err := compile(p, convertBindings[B](ctx, bindings))
		return p, compiled, err
	}
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

// KeyOfResult is the key of the policy of a result, by the result's source
// and policy name ("namespace/name" for a namespaced kind's); of an
// unknown source, the name.
func KeyOfResult(source, policy string) string {
	namespaced := strings.Contains(policy, "/")
	for _, k := range kinds {
		if k.Source == source && k.Namespaced == namespaced {
			return k.KeyPrefix + policy
		}
	}
	return policy
}
