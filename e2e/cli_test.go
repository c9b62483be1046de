package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
)

// clusterPolicies read the live cluster: a ConfigMap through a context
// entry, an API path through an apiCall, and the Pod's Namespace through a
// ValidatingPolicy's resource.Get.
const clusterPolicies = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: cli-allowed-image}
spec:
  rules:
  - name: image
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: settings
      configMap: {name: cli-settings, namespace: "{{ request.namespace }}"}
    - name: nsenv
      apiCall: {urlPath: "/api/v1/namespaces/{{ request.namespace }}", jmesPath: "metadata.labels.env || ''"}
    validate:
      message: "image must be {{ settings.data.image }} in {{ nsenv }}"
      deny: {conditions: {any: [{key: "{{ request.object.spec.containers[0].image }}", operator: NotEquals, value: "{{ settings.data.image }}"}]}}
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: cli-team-from-namespace}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  variables:
  - name: ns
    expression: resource.Get('v1', 'namespaces', '', object.metadata.namespace)
  validations:
  - expression: object.metadata.labels.team == variables.ns.metadata.labels.team
    message: the Pod's team must be its namespace's
`

// tally apply --cluster evaluates the resources of a live cluster that the
// policies match, in one namespace with -n, and serves what the policies
// read of the cluster from it, as the Kyverno CLI's --cluster does.
func TestApplyCluster(t *testing.T) {
	const ns, other = "cli-cluster", "cli-cluster-other"
	dir := t.TempDir()
	bin := filepath.Join(dir, "tally")
	f := features.New("tally apply --cluster").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tally")
			build.Dir = ".."
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build ./cmd/tally: %v\n%s", err, out)
			}
			r := cfg.Client().Resources()
			good := newPod(ns, "good", map[string]string{"team": "a"})
			wrongTeam := newPod(ns, "wrong-team", map[string]string{"team": "b"})
			badImage := newPod(ns, "bad-image", map[string]string{"team": "a"})
			badImage.Spec.Containers[0].Image = "busybox"
			for _, o := range []k8s.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"env": "prod", "team": "a"}}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cli-settings", Namespace: ns}, Data: map[string]string{"image": "nginx:1.27"}},
				good, wrongTeam, badImage, newPod(other, "elsewhere", nil),
			} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatalf("create %T %s: %v", o, o.GetName(), err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "policies.yaml"), []byte(clusterPolicies), 0o600); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("the namespace's Pods are evaluated with the cluster's data", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			cmd := exec.CommandContext(ctx, bin, "apply", filepath.Join(dir, "policies.yaml"), "--cluster",
				"--kubeconfig", cfg.KubeconfigFile(), "-n", ns, "--detailed-results")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1 (a failure)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			out := stdout.String()
			for _, want := range []string{
				"image must be nginx:1.27 in prod",
				"the Pod's team must be its namespace's",
				"pass: 4, fail: 2, warn: 0, error: 0, skip: 0",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "elsewhere") {
				t.Errorf("-n %s evaluated a Pod of another namespace:\n%s", ns, out)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			for _, n := range []string{ns, other} {
				_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
