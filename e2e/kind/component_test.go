package kind

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/e2e/cluster"
)

// The webhook-client-ca component makes the standalone scanner require the
// API server's client certificate, as the chart's webhook.clientCA does.
func TestWebhookClientCAComponent(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel := func(p string) string { // kustomize takes relative paths only
		r, err := filepath.Rel(dir, filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	overlay := "resources: [" + rel("config/overlays/standalone") + "]\ncomponents: [" + rel("config/components/webhook-client-ca") + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	var scanner *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "tally-scanner" {
			scanner = o
		}
	}
	if scanner == nil {
		t.Fatal("no tally-scanner Deployment rendered")
	}
	containers, _, _ := unstructured.NestedSlice(scanner.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if !slices.Contains(args, "--webhook-client-ca=/etc/tally/webhook-client-ca/ca.crt") || !slices.Contains(args, "--webhook-listen=:9443") {
		t.Errorf("scanner args = %v", args)
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	volumes, _, _ := unstructured.NestedSlice(scanner.Object, "spec", "template", "spec", "volumes")
	if len(mounts) != 2 || len(volumes) != 2 {
		t.Errorf("volumeMounts = %v, volumes = %v: want tmp and webhook-client-ca", mounts, volumes)
	}
	secret, _, _ := unstructured.NestedString(volumes[len(volumes)-1].(map[string]any), "secret", "secretName")
	if secret != "tally-webhook-client-ca" {
		t.Errorf("the CA comes from Secret %q, want tally-webhook-client-ca", secret)
	}
}

// The pod-image-pull-secrets component turns on --pod-image-pull-secrets
// and grants the scanner get on Secrets (nothing more), as the chart's
// scanner.podImagePullSecrets does.
func TestPodImagePullSecretsComponent(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	overlay := "resources: [" + rel("config/overlays/standalone") + "]\ncomponents: [" + rel("config/components/pod-image-pull-secrets") + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	var rules []any
	var subjectNS string
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "tally-scanner":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			args, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		case o.GetKind() == "ClusterRole" && o.GetName() == "tally-scanner-pod-pull-secrets":
			rules, _, _ = unstructured.NestedSlice(o.Object, "rules")
		case o.GetKind() == "ClusterRoleBinding" && o.GetName() == "tally-scanner-pod-pull-secrets":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			subjectNS, _, _ = unstructured.NestedString(subjects[0].(map[string]any), "namespace")
		}
	}
	if !slices.Contains(args, "--pod-image-pull-secrets") {
		t.Errorf("scanner args = %v", args)
	}
	if len(rules) != 1 {
		t.Fatalf("rules = %v", rules)
	}
	verbs, _, _ := unstructured.NestedStringSlice(rules[0].(map[string]any), "verbs")
	resources, _, _ := unstructured.NestedStringSlice(rules[0].(map[string]any), "resources")
	if !slices.Equal(verbs, []string{"get"}) || !slices.Equal(resources, []string{"secrets"}) {
		t.Errorf("rule = %v", rules[0])
	}
	if subjectNS == "" {
		t.Error("the binding's subject has no namespace")
	}
}
