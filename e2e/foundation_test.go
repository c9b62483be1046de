package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov1alpha2 "github.com/tally-dev/tally/api/kyverno/v1alpha2"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

const foundationNS = "foundation"

func sampleResults() []wgv1alpha2.PolicyReportResult {
	return []wgv1alpha2.PolicyReportResult{{
		Source: "kyverno", Policy: "require-labels", Rule: "check-team",
		Category: "Best Practices", Severity: "medium",
		Timestamp: metav1.Timestamp{Seconds: 1700000000, Nanos: 42},
		Result:    wgv1alpha2.ResultFail, Scored: true,
		Message:    "validation error: label 'team' is required. rule check-team failed at path /metadata/labels/team/",
		Properties: map[string]string{"process": "background scan"},
	}, {
		Source: "kyverno", Policy: "ns/restrict", Rule: "r1",
		Timestamp: metav1.Timestamp{Seconds: 1700000001},
		Result:    wgv1alpha2.ResultPass, Scored: true,
		Message: "validation rule 'r1' passed.",
	}}
}

func sampleReportSpec() kyvernov2.ReportSpec {
	res := sampleResults()
	return kyvernov2.ReportSpec{
		Owner:   metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "0f8e1b9c-0000-4000-8000-000000000001"},
		Results: res,
		Summary: wgv1alpha2.SummaryOf(res),
	}
}

// oneOfEachKind returns an object of every kind in api/, filled in enough to
// show that nothing is pruned on the way through the API server.
func oneOfEachKind() []k8s.Object {
	pattern := &apiextv1.JSON{Raw: []byte(`{"metadata":{"labels":{"team":"?*"}},"spec":{"=(hostNetwork)":false}}`)}
	rule := kyvernov1.Rule{
		Name: "check-team",
		Match: kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{{
			Resources: kyvernov1.ResourceDescription{Kinds: []string{"Pod"}, Namespaces: []string{"prod-*"}},
		}}},
		Exclude: &kyvernov1.MatchResources{All: kyvernov1.ResourceFilters{{
			Resources: kyvernov1.ResourceDescription{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"skip": "yes"}}},
		}}},
		Preconditions:    &apiextv1.JSON{Raw: []byte(`{"all":[{"key":"{{ request.operation }}","operator":"NotEquals","value":"DELETE"}]}`)},
		Context:          []kyvernov1.ContextEntry{{Name: "v", Variable: &kyvernov1.Variable{JMESPath: "request.object.metadata.name"}}},
		ReportProperties: map[string]string{"owner": "platform"},
		Validate: &kyvernov1.Validation{
			FailureAction: ptr.To(kyvernov1.Enforce),
			Message:       "label 'team' is required",
			Pattern:       pattern,
		},
	}
	psRule := kyvernov1.Rule{
		Name:  "baseline",
		Match: kyvernov1.MatchResources{Resources: kyvernov1.ResourceDescription{Kinds: []string{"Pod"}}},
		Validate: &kyvernov1.Validation{PodSecurity: &kyvernov1.PodSecurity{
			Level: "baseline", Version: "latest",
			Exclude: []kyvernov1.PodSecurityStandard{{ControlName: "Capabilities", Images: []string{"nginx*"}}},
		}},
	}
	spec := kyvernov1.Spec{
		Background:              ptr.To(true),
		Admission:               ptr.To(true), // the CRD defaults it, as Kyverno's does
		ValidationFailureAction: kyvernov1.Audit,
		Rules:                   []kyvernov1.Rule{rule, psRule},
	}
	meta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"policies.kyverno.io/category": "Best Practices"}}
	}
	res := sampleResults()
	return []k8s.Object{
		&kyvernov1.ClusterPolicy{ObjectMeta: meta("require-labels", ""), Spec: spec},
		&kyvernov1.Policy{ObjectMeta: meta("restrict", foundationNS), Spec: spec},
		&kyvernov2.PolicyException{ObjectMeta: meta("allow-team", foundationNS), Spec: kyvernov2.PolicyExceptionSpec{
			Match: kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{{Resources: kyvernov1.ResourceDescription{Kinds: []string{"Pod"}, Names: []string{"legacy-*"}}}}},
			Conditions: &kyvernov1.AnyAllConditions{Any: []kyvernov1.Condition{{
				Key: &apiextv1.JSON{Raw: []byte(`"{{ request.object.metadata.labels.app || '' }}"`)}, Operator: "Equals", Value: &apiextv1.JSON{Raw: []byte(`"legacy"`)},
			}}},
			Exceptions: []kyvernov2.Exception{{PolicyName: "require-labels", RuleNames: []string{"check-team", "autogen-check-team"}}},
		}},
		&kyvernov2.AdmissionReport{ObjectMeta: meta("adm", foundationNS), Spec: sampleReportSpec()},
		&kyvernov2.ClusterAdmissionReport{ObjectMeta: meta("cadm", ""), Spec: sampleReportSpec()},
		&kyvernov2.BackgroundScanReport{ObjectMeta: meta("bg", foundationNS), Spec: sampleReportSpec()},
		&kyvernov2.ClusterBackgroundScanReport{ObjectMeta: meta("cbg", ""), Spec: sampleReportSpec()},
		&kyvernov1alpha2.AdmissionReport{ObjectMeta: meta("adm-old", foundationNS), Spec: sampleReportSpec()},
		&kyvernov1alpha2.ClusterAdmissionReport{ObjectMeta: meta("cadm-old", ""), Spec: sampleReportSpec()},
		&kyvernov1alpha2.BackgroundScanReport{ObjectMeta: meta("bg-old", foundationNS), Spec: sampleReportSpec()},
		&kyvernov1alpha2.ClusterBackgroundScanReport{ObjectMeta: meta("cbg-old", ""), Spec: sampleReportSpec()},
		&wgv1alpha2.PolicyReport{ObjectMeta: meta("polr", foundationNS), Results: res, Summary: wgv1alpha2.SummaryOf(res),
			Scope: &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: foundationNS, Name: "p", UID: "u"}},
		&wgv1alpha2.ClusterPolicyReport{ObjectMeta: meta("cpolr", ""), Results: res, Summary: wgv1alpha2.SummaryOf(res),
			Scope: &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: foundationNS, UID: "u"}},
	}
}

// content is an object as JSON without metadata and status: what a client
// wrote and must read back unchanged.
func content(t *testing.T, obj k8s.Object) map[string]any {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"metadata", "status", "apiVersion", "kind"} {
		delete(m, k)
	}
	return m
}

func TestEveryKindRoundTrips(t *testing.T) {
	f := features.New("api kinds").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: foundationNS}}
			if err := cfg.Client().Resources().Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("each kind is created, read back intact and deleted", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			for _, obj := range oneOfEachKind() {
				name := fmt.Sprintf("%T %s", obj, obj.GetName())
				want := content(t, obj)
				if err := r.Create(ctx, obj); err != nil {
					t.Fatalf("create %s: %v", name, err)
				}
				got := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(k8s.Object)
				if err := r.Get(ctx, obj.GetName(), obj.GetNamespace(), got); err != nil {
					t.Fatalf("get %s: %v", name, err)
				}
				if g := content(t, got); !reflect.DeepEqual(g, want) {
					gj, _ := json.Marshal(g)
					wj, _ := json.Marshal(want)
					t.Errorf("%s did not round-trip:\n got %s\nwant %s", name, gj, wj)
				}
				if err := r.Delete(ctx, got); err != nil {
					t.Fatalf("delete %s: %v", name, err)
				}
				if err := wait.For(conditions.New(r).ResourceDeleted(got), wait.WithTimeout(30*time.Second), wait.WithInterval(100*time.Millisecond)); err != nil {
					t.Errorf("%s not deleted: %v", name, err)
				}
			}
			return ctx
		}).
		Assess("pods are admitted and stay pending", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources(foundationNS)
			for i := range 3 {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: foundationNS, Labels: map[string]string{"app": "web"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27"}}},
				}
				if err := r.Create(ctx, pod); err != nil {
					t.Fatalf("create pod: %v", err)
				}
			}
			var pods corev1.PodList
			if err := r.List(ctx, &pods); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 3 {
				t.Fatalf("listed %d pods, want 3", len(pods.Items))
			}
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
					t.Errorf("pod %s is %s, want Pending (no kubelet)", p.Name, p.Status.Phase)
				}
			}
			return ctx
		}).
		Assess("deleting an owner garbage-collects its report", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources(foundationNS)
			owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: foundationNS}}
			if err := r.Create(ctx, owner); err != nil {
				t.Fatal(err)
			}
			res := sampleResults()
			report := &wgv1alpha2.PolicyReport{
				ObjectMeta: metav1.ObjectMeta{Name: string(owner.UID), Namespace: foundationNS,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}},
				Scope:   &corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: foundationNS, Name: owner.Name, UID: owner.UID},
				Results: res, Summary: wgv1alpha2.SummaryOf(res),
			}
			if err := r.Create(ctx, report); err != nil {
				t.Fatal(err)
			}
			if err := r.Delete(ctx, owner, func(o *metav1.DeleteOptions) { o.PropagationPolicy = ptr.To(metav1.DeletePropagationBackground) }); err != nil {
				t.Fatal(err)
			}
			// The garbage collector discovers new CRDs on a 30 s timer, so the
			// first collection after the CRDs appear can take that long.
			err := wait.For(conditions.New(r).ResourceDeleted(report), wait.WithTimeout(120*time.Second), wait.WithInterval(250*time.Millisecond))
			if err != nil {
				t.Fatalf("report owned by a deleted ConfigMap was not garbage-collected: %v", err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var pods corev1.PodList
			r := cfg.Client().Resources(foundationNS)
			if err := r.List(ctx, &pods); err == nil {
				for i := range pods.Items {
					_ = r.Delete(ctx, &pods.Items[i], func(o *metav1.DeleteOptions) { o.GracePeriodSeconds = ptr.To[int64](0) })
				}
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
