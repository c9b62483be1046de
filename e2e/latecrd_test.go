package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/e2e/cluster"
)

// TestScannerWatchesAPolicyKindServedLater: the order of a fresh install
// (issue 57). On a control plane of its own where the ValidatingPolicy
// CRDs are not installed when the scanner starts, the CRDs are installed
// afterwards; the scanner then watches ValidatingPolicies and reports
// them, without a restart. So with a kind only Kyverno evaluates
// (GeneratingPolicy), whose policies it then tells of.
func TestScannerWatchesAPolicyKindServedLater(t *testing.T) {
	if os.Getenv(cluster.EnvKubeconfig) != "" {
		t.Skip("needs a control plane of its own (not " + cluster.EnvKubeconfig + ")")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()

	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bases := filepath.Join(root, "config", "crd", "bases")
	early, late := t.TempDir(), t.TempDir()
	files, err := os.ReadDir(bases)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(bases, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dir := early
		if strings.HasSuffix(f.Name(), "_validatingpolicies.yaml") || strings.HasSuffix(f.Name(), "_namespacedvalidatingpolicies.yaml") {
			dir = late
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.InstallCRDsFrom(c.Config, early); err != nil {
		t.Fatal(err)
	}

	scanner := startScanner(t, c.Config, "default")
	defer scanner.stop()
	scanner.waitSynced(t)

	if err := cluster.InstallCRDsFrom(c.Config, late); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "late-crd"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": "late-require-team"},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"configmaps"},
			}}},
			"validations": []any{map[string]any{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels", "message": "label team is required"}},
		},
	}}
	if _, err := dyn.Resource(apiresources.ValidatingPolicy).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Picked up within the discovery schedule's longest wait (30 s).
	waitForResults(ctx, t, envconf.NewWithKubeConfig(c.Kubeconfig), cm, map[string]string{"late-require-team/": "fail"})

	// A kind only Kyverno evaluates, served later (Kyverno installed after
	// tally): its policies are told of (R46) without a restart. The CRD is
	// a minimal one of Kyverno's GeneratingPolicy kind.
	kyverno := t.TempDir()
	if err := os.WriteFile(filepath.Join(kyverno, "generatingpolicies.yaml"), []byte(generatingPolicyCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cluster.InstallCRDsFrom(c.Config, kyverno); err != nil {
		t.Fatal(err)
	}
	gpol := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
		"metadata": map[string]any{"name": "late-gpol"}, "spec": map[string]any{},
	}}
	gvr := schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "generatingpolicies"}
	if _, err := dyn.Resource(gvr).Create(ctx, gpol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=late-gpol"})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.Reason == "PolicyNotEvaluated" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no PolicyNotEvaluated Event on a GeneratingPolicy whose CRD came after the scanner's start: %v", err)
	}
}

// generatingPolicyCRD is a minimal CRD of Kyverno's GeneratingPolicy kind.
const generatingPolicyCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: generatingpolicies.policies.kyverno.io}
spec:
  group: policies.kyverno.io
  names: {kind: GeneratingPolicy, listKind: GeneratingPolicyList, plural: generatingpolicies, singular: generatingpolicy}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`
