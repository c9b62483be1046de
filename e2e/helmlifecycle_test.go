package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
)

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	cpolGVR   = schema.GroupVersionResource{Group: "kyverno.io", Version: "v1", Resource: "clusterpolicies"}
	polrGVR   = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
	deployGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// helmCLI runs `go tool helm` (pinned in go.mod) against one cluster, with
// Helm's own folders in a temporary one so no user setting is read.
type helmCLI struct {
	root, kubeconfig, home string
}

// run runs helm with args and returns its output; a failure is an error
// holding that output.
func (h helmCLI) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "helm", "--kubeconfig", h.kubeconfig}, args...)...)
	cmd.Dir = h.root
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// chartCRDs are the names of the CRDs the chart installs in standalone mode:
// every file of charts/tally/files/crd (<group>_<plural>.yaml) but Kyverno's
// reports.kyverno.io kinds.
func chartCRDs(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "charts", "tally", "files", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD files in charts/tally/files/crd: %v", err)
	}
	var names []string
	for _, f := range files {
		group, plural, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".yaml"), "_")
		// Kyverno's EphemeralReports, and BackgroundScanReports (which
		// never reach the API server), are generated but not installed.
		if group != "reports.kyverno.io" && !strings.HasSuffix(plural, "backgroundscanreports") {
			names = append(names, plural+"."+group)
		}
	}
	return names
}

// TestHelmLifecycle installs charts/tally with helm on a control plane of its
// own, creates a ClusterPolicy and a PolicyReport, upgrades the release and
// uninstalls it: the CRDs, the policy and the report survive, and the chart
// installs again over them. It then installs over CRDs that are not the
// release's: another release's, and CRDs applied by hand.
//
// Unlike the other tests it does not use TestMain's cluster: that one has
// every CRD already (installed by hand), and the chart must find none to
// show it installs them. There is no kubelet: the Deployments are created
// and never run, which is all Helm's lifecycle needs.
func TestHelmLifecycle(t *testing.T) {
	// cluster.Start would return the E2E_KUBECONFIG cluster: always a fresh
	// local control plane here.
	t.Setenv(cluster.EnvKubeconfig, "")
	const (
		release   = "tally"
		namespace = "tally-system"
		reportNS  = "default"
	)
	var (
		root   string
		helm   helmCLI
		rc     *rest.Config
		dyn    dynamic.Interface
		crds   []string
		policy *unstructured.Unstructured
		report *unstructured.Unstructured
	)
	// survivors checks that the CRDs, the policy and the report are still
	// there, the objects unchanged (same UID).
	survivors := func(ctx context.Context, t *testing.T) {
		t.Helper()
		for _, name := range crds {
			if _, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("CRD %s: %v", name, err)
			}
		}
		if got, err := dyn.Resource(cpolGVR).Get(ctx, policy.GetName(), metav1.GetOptions{}); err != nil || got.GetUID() != policy.GetUID() {
			t.Errorf("ClusterPolicy %s: %v (uid %v, want %s)", policy.GetName(), err, uidOf(got), policy.GetUID())
		}
		if got, err := dyn.Resource(polrGVR).Namespace(reportNS).Get(ctx, report.GetName(), metav1.GetOptions{}); err != nil || got.GetUID() != report.GetUID() {
			t.Errorf("PolicyReport %s/%s: %v (uid %v, want %s)", reportNS, report.GetName(), err, uidOf(got), report.GetUID())
		}
	}
	// owner is the release a CRD's Helm ownership metadata names, "" if none.
	owner := func(ctx context.Context, t *testing.T, name string) (string, *unstructured.Unstructured) {
		t.Helper()
		crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		a := crd.GetAnnotations()
		if a["meta.helm.sh/release-name"] == "" {
			return "", crd
		}
		return a["meta.helm.sh/release-namespace"] + "/" + a["meta.helm.sh/release-name"], crd
	}

	f := features.New("helm install, upgrade, uninstall and install again").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			var err error
			if root, err = cluster.RepoRoot(); err != nil {
				t.Fatal(err)
			}
			c, err := cluster.Start(ctx, cluster.Options{NoControllerManager: true})
			if err != nil {
				t.Fatalf("a control plane for the chart: %v", err)
			}
			t.Cleanup(func() { _ = c.Stop() })
			rc = c.Config
			if dyn, err = dynamic.NewForConfig(rc); err != nil {
				t.Fatal(err)
			}
			helm = helmCLI{root: root, kubeconfig: c.Kubeconfig, home: t.TempDir()}
			crds = chartCRDs(t, root)
			return ctx
		}).
		Assess("install creates every CRD, marked to be kept, and says how to check readiness", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			out, err := helm.run(ctx, "install", release, "charts/tally", "-n", namespace, "--create-namespace")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("helm install:\n%s", out)
			for _, want := range []string{"rollout status deployment/tally-scanner", "image.tag"} {
				if !strings.Contains(out, want) {
					t.Errorf("the install's notes lack %q:\n%s", want, out)
				}
			}
			for _, name := range crds {
				who, crd := owner(ctx, t, name)
				if who != namespace+"/"+release || crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" || crd.GetLabels()["app.kubernetes.io/part-of"] != "tally" {
					t.Errorf("CRD %s: owner %q, resource-policy %q, labels %v; want %s/%s, keep, part-of tally",
						name, who, crd.GetAnnotations()["helm.sh/resource-policy"], crd.GetLabels(), namespace, release)
				}
			}
			waitEstablished(ctx, t, dyn, crds)
			return ctx
		}).
		Assess("a ClusterPolicy and a PolicyReport; kubectl's columns show ADMISSION, BACKGROUND, READY", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			var err error
			// The webhook configuration is installed and no scanner runs:
			// failurePolicy Ignore admits the policy.
			policy, err = dyn.Resource(cpolGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
				"metadata": map[string]any{"name": "require-team-label"},
				"spec": map[string]any{"rules": []any{map[string]any{
					"name":     "team",
					"match":    map[string]any{"any": []any{map[string]any{"resources": map[string]any{"kinds": []any{"Pod"}}}}},
					"validate": map[string]any{"message": "label team is required", "pattern": map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "?*"}}}},
				}}},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, field := range []string{"admission", "background"} {
				if v, found, _ := unstructured.NestedBool(policy.Object, "spec", field); !found || !v {
					t.Errorf("spec.%s = %v (set: %v), want the CRD's default true", field, v, found)
				}
			}
			report, err = dyn.Resource(polrGVR).Namespace(reportNS).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
				"metadata": map[string]any{"name": "5b0f3c4e-0000-4000-8000-000000000001", "namespace": reportNS},
				"results": []any{map[string]any{"policy": "require-team-label", "rule": "team", "result": "fail", "source": "kyverno",
					"message": "label team is required", "timestamp": map[string]any{"seconds": int64(1767225600), "nanos": int64(0)}}},
				"summary": map[string]any{"pass": int64(0), "fail": int64(1), "warn": int64(0), "error": int64(0), "skip": int64(0)},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			columns, row := policyTable(ctx, t, rc)
			for _, want := range []string{"ADMISSION=true", "BACKGROUND=true", "READY="} {
				if !slices.ContainsFunc(row, func(cell string) bool { return strings.HasPrefix(cell, want) }) {
					t.Errorf("kubectl get cpol: columns %v, row %v; want %s", columns, row, want)
				}
			}
			return ctx
		}).
		Assess("upgrade applies new values and keeps the CRDs, the policy and the report", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if _, err := helm.run(ctx, "upgrade", release, "charts/tally", "-n", namespace, "--reuse-values", "--set", "scanner.scanInterval=30m"); err != nil {
				t.Fatal(err)
			}
			scanner, err := dyn.Resource(deployGVR).Namespace(namespace).Get(ctx, "tally-scanner", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if data, _ := json.Marshal(scanner.Object["spec"]); !strings.Contains(string(data), `"--background-scan-interval=30m"`) {
				t.Errorf("tally-scanner after the upgrade lacks --background-scan-interval=30m")
			}
			survivors(ctx, t)
			return ctx
		}).
		Assess("uninstall removes tally and keeps the CRDs, the policy and the report", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			out, err := helm.run(ctx, "uninstall", release, "-n", namespace, "--wait", "--timeout", "2m")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "kept due to the resource policy") {
				t.Errorf("helm uninstall does not say it kept the CRDs:\n%s", out)
			}
			if _, err := dyn.Resource(deployGVR).Namespace(namespace).Get(ctx, "tally-scanner", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("tally-scanner after uninstall: %v, want NotFound", err)
			}
			survivors(ctx, t)
			return ctx
		}).
		Assess("install again adopts the kept CRDs; upgrade and uninstall still keep them", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			for _, args := range [][]string{
				{"install", release, "charts/tally", "-n", namespace},
				{"upgrade", release, "charts/tally", "-n", namespace},
				{"uninstall", release, "-n", namespace, "--wait", "--timeout", "2m"},
			} {
				if _, err := helm.run(ctx, args...); err != nil {
					t.Fatal(err)
				}
			}
			survivors(ctx, t)
			return ctx
		}).
		Assess("install over another release's CRDs leaves them to it", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			out, err := helm.run(ctx, "install", "other", "charts/tally", "-n", "elsewhere", "--create-namespace")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "existed already") || !strings.Contains(out, crds[0]) {
				t.Errorf("the notes do not name the CRDs left alone:\n%s", out)
			}
			t.Logf("helm install over another release's CRDs:\n%s", out)
			manifest, err := helm.run(ctx, "get", "manifest", "other", "-n", "elsewhere")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(manifest, "kind: CustomResourceDefinition") {
				t.Errorf("release other holds CRDs that were another release's")
			}
			for _, name := range crds {
				if who, _ := owner(ctx, t, name); who != namespace+"/"+release {
					t.Errorf("CRD %s now belongs to %q, want still %s/%s", name, who, namespace, release)
				}
			}
			if _, err := helm.run(ctx, "uninstall", "other", "-n", "elsewhere", "--wait", "--timeout", "2m"); err != nil {
				t.Fatal(err)
			}
			survivors(ctx, t)
			return ctx
		}).
		Assess("install over CRDs applied by hand leaves them as they are", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			// The kept CRDs become CRDs applied by hand (kubectl apply -k
			// config/crd, Kyverno's manifests): the same definitions without
			// Helm's ownership metadata. (Deleting and recreating them would
			// do the same, but a CRD's deletion waits for the API server's
			// cleanup of its objects, which took minutes on a loaded machine.)
			strip := []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null,"app.kubernetes.io/part-of":null},` +
				`"annotations":{"meta.helm.sh/release-name":null,"meta.helm.sh/release-namespace":null,"helm.sh/resource-policy":null}}}`)
			for _, name := range crds {
				if _, err := dyn.Resource(crdGVR).Patch(ctx, name, types.MergePatchType, strip, metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := helm.run(ctx, "install", release, "charts/tally", "-n", namespace); err != nil {
				t.Fatal(err)
			}
			for _, name := range crds {
				who, crd := owner(ctx, t, name)
				if who != "" || crd.GetAnnotations()["helm.sh/resource-policy"] != "" {
					t.Errorf("CRD %s applied by hand now has Helm metadata (owner %q)", name, who)
				}
			}
			if _, err := helm.run(ctx, "uninstall", release, "-n", namespace, "--wait", "--timeout", "2m"); err != nil {
				t.Fatal(err)
			}
			survivors(ctx, t)
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

func uidOf(u *unstructured.Unstructured) types.UID {
	if u == nil {
		return ""
	}
	return u.GetUID()
}

// waitEstablished waits until every named CRD is served.
func waitEstablished(ctx context.Context, t *testing.T, dyn dynamic.Interface, names []string) {
	t.Helper()
	err := wait.For(func(ctx context.Context) (bool, error) {
		for _, name := range names {
			crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			if !slices.ContainsFunc(conditions, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			}) {
				return false, nil
			}
		}
		return true, nil
	}, wait.WithTimeout(time.Minute), wait.WithInterval(200*time.Millisecond), wait.WithContext(ctx))
	if err != nil {
		t.Fatalf("CRDs not established: %v", err)
	}
}

// policyTable gets the ClusterPolicies as kubectl does (a server-side
// Table) and returns the column names and the first row as NAME=value cells.
func policyTable(ctx context.Context, t *testing.T, rc *rest.Config) (columns, row []string) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	data, err := kube.RESTClient().Get().AbsPath("/apis/kyverno.io/v1/clusterpolicies").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) == 0 {
		t.Fatalf("no ClusterPolicy in the table")
	}
	for i, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
		if i < len(table.Rows[0].Cells) {
			row = append(row, fmt.Sprintf("%s=%v", c.Name, table.Rows[0].Cells[i]))
		}
	}
	return columns, row
}
