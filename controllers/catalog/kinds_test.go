package catalog

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// Every controller names a policy by the key the table gives: these are
// the keys the controllers used before the table, kind by kind.
func TestKeysAndReportNamesOfEveryKind(t *testing.T) {
	for _, tc := range []struct {
		gvr             schema.GroupVersionResource
		namespace, name string
		key, source     string
	}{
		{apiresources.ClusterPolicy, "", "x", "x", report.Source},
		{apiresources.Policy, "team-a", "x", "team-a/x", report.Source},
		{apiresources.ValidatingPolicy, "", "x", "ValidatingPolicy/x", engine.SourceValidatingPolicy},
		{apiresources.NamespacedValidatingPolicy, "team-a", "x", "NamespacedValidatingPolicy/team-a/x", engine.SourceValidatingPolicy},
		{apiresources.MutatingPolicy, "", "x", "MutatingPolicy/x", engine.SourceMutatingPolicy},
		{apiresources.NamespacedMutatingPolicy, "team-a", "x", "NamespacedMutatingPolicy/team-a/x", engine.SourceMutatingPolicy},
		{apiresources.ImageValidatingPolicy, "", "x", "ImageValidatingPolicy/x", engine.SourceImageValidatingPolicy},
		{apiresources.NamespacedImageValidatingPolicy, "team-a", "x", "NamespacedImageValidatingPolicy/team-a/x", engine.SourceImageValidatingPolicy},
		{apiresources.ValidatingAdmissionPolicy, "", "x", "ValidatingAdmissionPolicy/x", engine.SourceValidatingAdmissionPolicy},
		{apiresources.MutatingAdmissionPolicy, "", "x", "MutatingAdmissionPolicy/x", engine.SourceMutatingAdmissionPolicy},
		{policiesv1.GroupVersion.WithResource("generatingpolicies"), "", "x", "GeneratingPolicy/x", policiesv1.SourceGeneratingPolicy},
		{schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1beta1", Resource: "namespacedgeneratingpolicies"}, "team-a", "x",
			"NamespacedGeneratingPolicy/team-a/x", policiesv1.SourceGeneratingPolicy},
	} {
		k, ok := KindOf(tc.gvr)
		if !ok {
			t.Errorf("%s: not in the table", tc.gvr)
			continue
		}
		if got := Key(tc.gvr, tc.namespace, tc.name); got != tc.key {
			t.Errorf("Key(%s) = %q, want %q", tc.gvr, got, tc.key)
		}
		if k.Source != tc.source {
			t.Errorf("%s: source %q, want %q", k.Name, k.Source, tc.source)
		}
		// A result names its policy by source and report name; the key
		// found back from them is the policy's.
		if got := KeyOfResult(k.Source, k.ReportName(tc.namespace, tc.name)); got != tc.key {
			t.Errorf("KeyOfResult(%q, %q) = %q, want %q", k.Source, k.ReportName(tc.namespace, tc.name), got, tc.key)
		}
	}
	if got := Key(apiresources.ConfigMap, "ns", "x"); got != "x" {
		t.Errorf("the key of a kind not in the table: %q, want its name", got)
	}
	if _, ok := KindOf(schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v2", Resource: "generatingpolicies"}); ok {
		t.Error("a Kyverno-only kind was found in a version it is not looked for in")
	}
}

// The table is whole: every kind of a family has what its family's
// controllers call, and no two kinds share a key prefix and scope.
func TestEveryDescriptorIsWhole(t *testing.T) {
	seen := map[string]string{}
	for _, k := range Kinds() {
		if k.Name == "" || k.Source == "" || k.GVR.Resource == "" || len(k.Versions) == 0 {
			t.Errorf("%+v: a name, a source, a resource and a version are needed", k)
		}
		id := k.KeyPrefix + map[bool]string{true: "namespaced", false: "cluster"}[k.Namespaced]
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s: the same keys", k.Name, other)
		}
		seen[id] = k.Name
		switch k.Family {
		case Classic, CEL:
			if !k.Compiled() {
				t.Errorf("%s: compiled alone, but no read function", k.Name)
			}
			if k.Family == CEL && k.modes == nil {
				t.Errorf("%s: a CEL kind without modes", k.Name)
			}
		case AdmissionPolicy:
			if k.compileBound == nil || k.Binding.Resource == "" {
				t.Errorf("%s: compiled with bindings, but no binding kind or compile function", k.Name)
			}
		case KyvernoOnly:
			if k.Compiled() || k.Admission || k.NotReported == "" {
				t.Errorf("%s: Kyverno's alone, yet tally compiles or admits it, or says nothing of what it leaves out", k.Name)
			}
		default:
			t.Errorf("%s: no family", k.Name)
		}
		if k.Admission && k.LabelPrefix == "" {
			t.Errorf("%s: evaluated at admission without the label prefix of its admission reports", k.Name)
		}
	}
}

// Whether a policy is reported: report.LabelReportsDisabled, whatever its
// value, keeps out a policy of any kind; a ValidatingAdmissionPolicy needs
// reports.kyverno.io/enabled "true".
func TestReported(t *testing.T) {
	vap, _ := KindOf(apiresources.ValidatingAdmissionPolicy)
	mapol, _ := KindOf(apiresources.MutatingAdmissionPolicy)
	for _, tc := range []struct {
		k      *Kind
		labels map[string]string
		want   bool
	}{
		{vap, nil, false},
		{vap, map[string]string{LabelReportsEnabled: "true"}, true},
		{vap, map[string]string{LabelReportsEnabled: "yes"}, false},
		{vap, map[string]string{LabelReportsEnabled: "true", report.LabelReportsDisabled: "false"}, false},
		{mapol, nil, true},
		{mapol, map[string]string{report.LabelReportsDisabled: ""}, false},
	} {
		if got := tc.k.Reported(tc.labels); got != tc.want {
			t.Errorf("%s with %v: reported %v, want %v", tc.k.Name, tc.labels, got, tc.want)
		}
	}
}

// An admission policy kind compiles through its descriptor with its
// bindings; a binding that cannot be read binds nothing.
func TestAnAdmissionPolicyCompilesWithItsBindings(t *testing.T) {
	vap, _ := KindOf(apiresources.ValidatingAdmissionPolicy)
	p := object(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replicas}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}
  validations: [{expression: "object.spec.replicas <= 5"}]
`)
	good := object(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replicas}
spec: {policyName: replicas, validationActions: [Audit]}
`)
	bad := object(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: broken}
spec: {policyName: replicas, validationActions: "not a list"}
`)
	obj, compiled, err := vap.CompileBound(context.Background(), p, []*unstructured.Unstructured{good, bad})
	if err != nil || obj == nil || compiled == nil {
		t.Fatalf("CompileBound: %v, %v, %v", obj, compiled, err)
	}
	if got := obj.GetObjectKind().GroupVersionKind().Kind; got != "ValidatingAdmissionPolicy" {
		t.Errorf("the object's kind %q", got)
	}
}
