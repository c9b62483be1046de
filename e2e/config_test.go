package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/e2e/kind"
)

var overlays = []string{"standalone", "beside-kyverno", "kind"}

func overlayDir(t *testing.T, name string) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "config", "overlays", name)
}

// ensureNamespace creates tally's namespace for real: a dry run of namespaced
// objects needs their namespace to exist.
func ensureNamespace(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kind.Namespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestConfigOverlays renders each overlay of config/ with the kustomize API
// and sends every object to the real API server as a server-side dry run
// (validation, defaulting, admission, nothing stored); it also checks the
// Deployments against the restricted Pod Security Standard and the roles
// against tally's least-privilege table.
func TestConfigOverlays(t *testing.T) {
	f := features.New("config overlays").
		Assess("every rendered object is accepted by the API server (dry run)", func(ctx context.Context, t *testing.T, c *envconf.Config) context.Context {
			rc := c.Client().RESTConfig()
			ensureNamespace(ctx, t, rc)
			for _, o := range overlays {
				t.Run(o, func(t *testing.T) {
					objs, err := kind.Render(overlayDir(t, o))
					if err != nil {
						t.Fatal(err)
					}
					if err := kind.Deploy(ctx, rc, overlayDir(t, o), true); err != nil {
						for _, line := range strings.Split(err.Error(), "\n") {
							t.Errorf("%s: %s", o, line)
						}
					}
					t.Logf("%s: %d objects accepted by the server in dry run", o, len(objs))
				})
			}
			return ctx
		}).
		Assess("the dry run does refuse a bad object, naming it", func(ctx context.Context, t *testing.T, c *envconf.Config) context.Context {
			dir := t.TempDir()
			write := func(name, data string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("kustomization.yaml", "resources: [bad.yaml]\n")
			write("bad.yaml", `apiVersion: v1
kind: Service
metadata: {name: tally-bad, namespace: tally-system}
spec:
  ports: [{port: 70000}]
`)
			err := kind.Deploy(ctx, c.Client().RESTConfig(), dir, true)
			if err == nil || !strings.Contains(err.Error(), "Service tally-system/tally-bad") || !strings.Contains(err.Error(), "70000") {
				t.Errorf("dry run of an invalid Service: got %v, want an error naming Service tally-system/tally-bad and the bad port", err)
			}
			kube, kerr := kubernetes.NewForConfig(c.Client().RESTConfig())
			if kerr != nil {
				t.Fatal(kerr)
			}
			if _, gerr := kube.CoreV1().Services(kind.Namespace).Get(ctx, "tally-bad", metav1.GetOptions{}); !apierrors.IsNotFound(gerr) {
				t.Errorf("a dry run stored something: %v", gerr)
			}
			return ctx
		}).
		Assess("Deployments meet the restricted Pod Security Standard; roles are least-privilege", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			for _, o := range overlays {
				objs, err := kind.Render(overlayDir(t, o))
				if err != nil {
					t.Fatal(err)
				}
				for _, err := range kind.CheckRestricted(objs) {
					t.Errorf("%s: %v", o, err)
				}
				for _, err := range kind.CheckLeastPrivilege(objs) {
					t.Errorf("%s: %v", o, err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// TestConfigRBACOnServer applies the standalone overlay's RBAC for real and
// asks the server's authorizer, impersonating each service account, whether
// the writes tally performs are allowed and everything else is refused.
// (The aggregated read role needs the role aggregation controller, which the
// test control plane does not run; its rules are covered by the render
// checks.)
func TestConfigRBACOnServer(t *testing.T) {
	f := features.New("RBAC on the API server").
		Setup(func(ctx context.Context, t *testing.T, c *envconf.Config) context.Context {
			rc := c.Client().RESTConfig()
			ensureNamespace(ctx, t, rc)
			objs, err := kind.Render(overlayDir(t, "standalone"))
			if err != nil {
				t.Fatal(err)
			}
			dyn, err := dynamic.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				gvk := o.GroupVersionKind()
				if gvk.Group != "rbac.authorization.k8s.io" {
					continue
				}
				gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}
				ri := dynamic.ResourceInterface(dyn.Resource(gvr))
				if o.GetNamespace() != "" {
					ri = dyn.Resource(gvr).Namespace(o.GetNamespace())
				}
				if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: kind.FieldManager, Force: true}); err != nil {
					t.Fatalf("%s: %v", kind.Describe(o), err)
				}
				t.Cleanup(func() { _ = ri.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}) })
			}
			// The webhook configuration exists (without webhooks) so that
			// the scanner's update of it can be tried.
			vwc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1",
				"kind": "ValidatingWebhookConfiguration", "metadata": map[string]any{"name": kind.WebhookConfig}}}
			vwcs := dyn.Resource(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"})
			if _, err := vwcs.Apply(ctx, kind.WebhookConfig, vwc, metav1.ApplyOptions{FieldManager: kind.FieldManager, Force: true}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = vwcs.Delete(context.Background(), kind.WebhookConfig, metav1.DeleteOptions{}) })
			return ctx
		}).
		Assess("the Pod of scanner and merger may do exactly their writes", func(ctx context.Context, t *testing.T, c *envconf.Config) context.Context {
			// One Pod, one ServiceAccount: the merger runs beside the scanner.
			scanner := impersonate(t, c.Client().RESTConfig(), "tally-scanner")
			merger := scanner
			ns := kind.Namespace
			cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
			secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
			pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			leases := schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
			bsr := schema.GroupVersionResource{Group: "kyverno.io", Version: "v2", Resource: "backgroundscanreports"}
			polr := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
			vwc := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
			cpol := schema.GroupVersionResource{Group: "kyverno.io", Version: "v1", Resource: "clusterpolicies"}
			applyAs := func(d dynamic.Interface, gvr schema.GroupVersionResource, namespace string, obj map[string]any) error {
				u := &unstructured.Unstructured{Object: obj}
				ri := dynamic.ResourceInterface(d.Resource(gvr))
				if namespace != "" {
					ri = d.Resource(gvr).Namespace(namespace)
				}
				_, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "tally-rbac-test", Force: true, DryRun: []string{metav1.DryRunAll}})
				return err
			}
			configMap := func(name string) map[string]any {
				return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": name, "namespace": ns}, "data": map[string]any{"p": "2026-01-01T00:00:00Z"}}
			}
			report := func(apiVersion, kindName string) map[string]any {
				return map[string]any{"apiVersion": apiVersion, "kind": kindName,
					"metadata": map[string]any{"name": "0b9c7a7e-0000-4000-8000-000000000001", "namespace": ns}}
			}
			lease := func(name string) map[string]any {
				return map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
					"metadata": map[string]any{"name": name, "namespace": ns}}
			}
			get := func(d dynamic.Interface, gvr schema.GroupVersionResource, namespace, name string) error {
				ri := dynamic.ResourceInterface(d.Resource(gvr))
				if namespace != "" {
					ri = d.Resource(gvr).Namespace(namespace)
				}
				_, err := ri.Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil // allowed to look; nothing there
				}
				return err
			}
			list := func(d dynamic.Interface, gvr schema.GroupVersionResource, namespace string) error {
				_, err := d.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: 1})
				return err
			}
			for _, tc := range []struct {
				what    string
				allowed bool
				do      func() error
			}{
				{"scanner applies the scan-state ConfigMap", true, func() error { return applyAs(scanner, cm, ns, configMap("tally-scan-state")) }},
				{"scanner reads the scan-state ConfigMap", true, func() error { return get(scanner, cm, ns, "tally-scan-state") }},
				{"scanner applies another ConfigMap", false, func() error { return applyAs(scanner, cm, ns, configMap("other")) }},
				// Each replica's membership Lease is named after its Pod: the
				// scanner creates, renews and deletes Leases of any name, in
				// its namespace only.
				{"scanner creates, renews and deletes a membership Lease", true, func() error {
					l := &unstructured.Unstructured{Object: lease("tally-member-tally-scanner-7d9f-abcde")}
					got, err := scanner.Resource(leases).Namespace(ns).Create(ctx, l, metav1.CreateOptions{})
					if err != nil {
						return err
					}
					if _, err := scanner.Resource(leases).Namespace(ns).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
						return err
					}
					return scanner.Resource(leases).Namespace(ns).Delete(ctx, got.GetName(), metav1.DeleteOptions{})
				}},
				{"scanner lists and watches the Leases of its namespace", true, func() error { return list(scanner, leases, ns) }},
				{"scanner creates a Lease in another namespace", false, func() error {
					l := &unstructured.Unstructured{Object: lease("tally-member-x")}
					l.SetNamespace("default")
					_, err := scanner.Resource(leases).Namespace("default").Create(ctx, l, metav1.CreateOptions{})
					return err
				}},
				// BackgroundScanReports pass from scanner to merger inside the
				// Pod: neither writes them to the API server.
				{"scanner applies a BackgroundScanReport", false, func() error {
					return applyAs(scanner, bsr, ns, report("kyverno.io/v2", "BackgroundScanReport"))
				}},
				{"scanner reads the webhook Secret", true, func() error { return get(scanner, secrets, ns, "tally-webhook-tls") }},
				{"scanner reads another Secret", false, func() error { return get(scanner, secrets, ns, "other") }},
				{"scanner lists Secrets", false, func() error { return list(scanner, secrets, "kube-system") }},
				{"scanner reads the webhook configuration", true, func() error { return get(scanner, vwc, "", kind.WebhookConfig) }},
				{"scanner reads another webhook configuration", false, func() error { return get(scanner, vwc, "", "other") }},
				{"scanner watches the webhook configurations", true, func() error {
					_, err := scanner.Resource(vwc).List(ctx, metav1.ListOptions{Limit: 1})
					return err
				}},
				{"scanner updates another webhook configuration", false, func() error {
					return applyAs(scanner, vwc, "", map[string]any{"apiVersion": "admissionregistration.k8s.io/v1",
						"kind": "ValidatingWebhookConfiguration", "metadata": map[string]any{"name": "other"}})
				}},
				{"scanner updates its webhook configuration (get, then update)", true, func() error {
					cur, err := scanner.Resource(vwc).Get(ctx, kind.WebhookConfig, metav1.GetOptions{})
					if err != nil {
						return err
					}
					_, err = scanner.Resource(vwc).Update(ctx, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
					return err
				}},
				{"scanner creates a Pod", false, func() error {
					return applyAs(scanner, pods, ns, map[string]any{"apiVersion": "v1", "kind": "Pod",
						"metadata": map[string]any{"name": "p", "namespace": ns},
						"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}})
				}},
				{"scanner patches a ClusterPolicy's status", true, func() error {
					return notFoundIsAllowed(scanner.Resource(cpol).Patch(ctx, "absent", types.MergePatchType, []byte(`{"status":{"ready":true}}`),
						metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status"))
				}},
				{"scanner patches a ClusterPolicy", false, func() error {
					return notFoundIsAllowed(scanner.Resource(cpol).Patch(ctx, "absent", types.MergePatchType, []byte(`{"spec":{"background":false}}`),
						metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}))
				}},
				{"merger applies a PolicyReport", true, func() error {
					return applyAs(merger, polr, ns, report("wgpolicyk8s.io/v1alpha2", "PolicyReport"))
				}},
				{"merger deletes a BackgroundScanReport", false, func() error {
					err := merger.Resource(bsr).Namespace(ns).Delete(ctx, "absent", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
					if apierrors.IsNotFound(err) {
						return nil
					}
					return err
				}},
				// The merger reads the scanned kinds (a GET tells whether the
				// resource of an orphaned report is gone), never Secrets.
				{"merger reads a ConfigMap", true, func() error { return get(merger, cm, ns, "tally-scan-state") }},
				{"merger reads another Secret", false, func() error {
					return get(merger, schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, ns, "other")
				}},
			} {
				err := tc.do()
				if apierrors.IsInvalid(err) {
					err = nil // validation runs after authorization: the request was allowed
				}
				switch {
				case tc.allowed && err != nil:
					t.Errorf("%s: want allowed, got %v", tc.what, err)
				case !tc.allowed && !apierrors.IsForbidden(err):
					t.Errorf("%s: want forbidden, got %v", tc.what, err)
				}
			}
			return ctx
		}).
		Assess("re-applying leaves the aggregated role's rules to the aggregation controller", func(ctx context.Context, t *testing.T, c *envconf.Config) context.Context {
			dyn, err := dynamic.NewForConfig(c.Client().RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			roles := dyn.Resource(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"})
			// The control plane's ClusterRole aggregation controller fills
			// the rules from the labelled roles.
			var aggregated []any
			err = wait.For(func(ctx context.Context) (bool, error) {
				cur, err := roles.Get(ctx, "tally-scanner-resources", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				aggregated, _, _ = unstructured.NestedSlice(cur.Object, "rules")
				return len(aggregated) > 0, nil
			}, wait.WithTimeout(time.Minute), wait.WithContext(ctx))
			if err != nil {
				t.Fatalf("the aggregation controller did not fill tally-scanner-resources: %v", err)
			}
			objs, err := kind.Render(overlayDir(t, "standalone"))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				if o.GetKind() != "ClusterRole" || o.GetName() != "tally-scanner-resources" {
					continue
				}
				// No Force: a manifest that owned the rules would conflict here.
				got, err := roles.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: kind.FieldManager})
				if err != nil {
					t.Fatalf("re-applying %s: %v", kind.Describe(o), err)
				}
				if rules, _, _ := unstructured.NestedSlice(got.Object, "rules"); len(rules) != len(aggregated) {
					t.Errorf("re-applying %s changed the aggregated rules: %v", kind.Describe(o), rules)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// notFoundIsAllowed: authorization runs before the lookup, so NotFound means
// the request was allowed.
func notFoundIsAllowed(_ any, err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func impersonate(t *testing.T, cfg *rest.Config, serviceAccount string) dynamic.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + kind.Namespace + ":" + serviceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + kind.Namespace, "system:authenticated"},
	}
	cfg.Timeout = 30 * time.Second
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
