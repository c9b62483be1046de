package kind

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/e2e/cluster"
)

func render(t *testing.T, overlay string) []*unstructured.Unstructured {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(filepath.Join(root, "config", "overlays", overlay))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GetKind()]++
	}
	return n
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// container is the named container of tally's Deployment, which holds two:
// the scanner and the merger.
func container(t *testing.T, objs []*unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	d := find(objs, "Deployment", ScannerDeployment)
	if d == nil {
		t.Fatalf("no Deployment %s", ScannerDeployment)
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) != 2 {
		t.Fatalf("Deployment %s: %d containers, want 2 (scanner and merger)", ScannerDeployment, len(cs))
	}
	for _, c := range cs {
		if c.(map[string]any)["name"] == name {
			return c.(map[string]any)
		}
	}
	t.Fatalf("Deployment %s has no container %s", ScannerDeployment, name)
	return nil
}

func args(c map[string]any) []string {
	a, _, _ := unstructured.NestedStringSlice(c, "args")
	return a
}

// TestRenderOverlays renders each overlay without a server and checks what
// each must and must not hold, the restricted Pod Security Standard and the
// least-privilege RBAC.
func TestRenderOverlays(t *testing.T) {
	common := map[string]int{
		"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 5, "ClusterRoleBinding": 4,
		"Deployment": 1, "PodDisruptionBudget": 1, "NetworkPolicy": 3,
	}
	with := func(extra map[string]int) map[string]int {
		m := map[string]int{}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	// Standalone, 3 more ClusterRoles: those aggregated into admin, edit
	// and view for users (config/rbac/tenants).
	standalone := with(map[string]int{"ClusterRole": 8, "CustomResourceDefinition": 17, "Role": 2, "RoleBinding": 2, "Service": 3, "ValidatingWebhookConfiguration": 1})
	for _, tc := range []struct {
		overlay string
		kinds   map[string]int
		image   string
	}{
		{"standalone", standalone, "ghcr.io/tally-dev/tally:0.1.0"},
		{"kind", standalone, Image},
		{"beside-kyverno", with(map[string]int{"Role": 1, "RoleBinding": 1, "Service": 2}), "ghcr.io/tally-dev/tally:0.1.0"},
	} {
		t.Run(tc.overlay, func(t *testing.T) {
			objs := render(t, tc.overlay)
			if got := kinds(objs); fmt.Sprint(got) != fmt.Sprint(tc.kinds) {
				t.Errorf("kinds: got %v, want %v", got, tc.kinds)
			}
			for _, o := range objs {
				if ns := o.GetNamespace(); ns != "" && ns != Namespace {
					t.Errorf("%s outside %s", Describe(o), Namespace)
				}
			}
			for _, d := range []string{"scanner", MergerContainer} {
				c := container(t, objs, d)
				if c["image"] != tc.image {
					t.Errorf("%s image %v, want %s", d, c["image"], tc.image)
				}
				if tc.overlay == "kind" && c["imagePullPolicy"] != "IfNotPresent" {
					t.Errorf("%s imagePullPolicy %v, want IfNotPresent", d, c["imagePullPolicy"])
				}
				if !slices.Contains(args(c), "--namespace=$(POD_NAMESPACE)") {
					t.Errorf("%s args %v lack --namespace=$(POD_NAMESPACE)", d, args(c))
				}
			}
			scanner := args(container(t, objs, "scanner"))
			merger := args(container(t, objs, MergerContainer))
			if !slices.Contains(merger, "--leader-elect=false") {
				t.Errorf("merger args %v lack --leader-elect=false: the pair's Lease is the scanner's", merger)
			}
			if tc.overlay == "beside-kyverno" {
				// Kyverno's tooling selects the final reports by
				// app.kubernetes.io/managed-by=kyverno.
				if !slices.Contains(merger, "--managed-by=kyverno") || !slices.Contains(scanner, "--managed-by=kyverno") {
					t.Errorf("merger args %v or scanner args %v lack --managed-by=kyverno (the scanner reads its results back from the final reports)", merger, scanner)
				}
				if !slices.Contains(scanner, "--webhook-listen=") {
					t.Errorf("scanner args %v lack --webhook-listen=", scanner)
				}
				if !slices.Contains(merger, "--ingest-kyverno-reports") {
					t.Errorf("merger args %v lack --ingest-kyverno-reports: it reads Kyverno's EphemeralReports", merger)
				}
				// tally writes no intermediate report beside Kyverno: the
				// overlay installs no CRD, and nothing Kyverno ships.
				for _, o := range objs {
					if o.GetKind() == "CustomResourceDefinition" {
						t.Errorf("beside Kyverno, %s must not be installed (tally writes no report of that kind there)", Describe(o))
						continue
					}
					if g := o.GroupVersionKind().Group; strings.Contains(g, "kyverno.io") || g == "wgpolicyk8s.io" {
						t.Errorf("beside Kyverno, %s must not be installed (Kyverno ships it)", Describe(o))
					}
				}
				if find(objs, "ClusterRole", "tally-scanner-webhook") != nil {
					t.Error("beside Kyverno, the scanner needs no rights on the webhook configuration")
				}
			} else {
				if slices.ContainsFunc(merger, func(a string) bool { return strings.HasPrefix(a, "--managed-by") }) {
					t.Errorf("merger args %v: on its own, tally labels its reports managed-by tally (the default)", merger)
				}
				if !slices.Contains(scanner, "--webhook-listen=:9443") {
					t.Errorf("scanner args %v lack --webhook-listen=:9443", scanner)
				}
				checkWebhook(t, objs)
			}
			checkNetworkPolicies(t, objs)
			for _, err := range CheckRestricted(objs) {
				t.Error(err)
			}
			for _, err := range CheckLeastPrivilege(objs) {
				t.Error(err)
			}
		})
	}
}

// TestRenderOverlaysWithKubectl renders every overlay with the kustomize
// that kubectl embeds, which the documented `kubectl apply -k` uses: it must
// render them at all (kubectl 1.32's kustomize v5.5.0 crashes on several
// `$patch: delete` documents in one patch file, kustomize issue 5471), and
// render the same objects as the pinned sigs.k8s.io/kustomize/api. That
// older kustomize cannot be linked beside the pinned one (one module, one
// version per build), so kubectl is run; without it the test is skipped.
func TestRenderOverlaysWithKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH: the overlays are rendered with the pinned kustomize API only (TestRenderOverlays)")
	}
	if out, err := exec.Command(kubectl, "version", "--client", "-o", "json").Output(); err == nil {
		var v struct {
			Client struct {
				GitVersion string `json:"gitVersion"`
			} `json:"clientVersion"`
			Kustomize string `json:"kustomizeVersion"`
		}
		if json.Unmarshal(out, &v) == nil {
			t.Logf("kubectl %s, kustomize %s", v.Client.GitVersion, v.Kustomize)
		}
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "config", "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		overlay := e.Name()
		t.Run(overlay, func(t *testing.T) {
			cmd := exec.Command(kubectl, "kustomize", filepath.Join(root, "config", "overlays", overlay))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("kubectl kustomize: %v\n%s", err, tail(stderr.Bytes(), 2000))
			}
			got, err := decodeObjects(stdout.Bytes())
			if err != nil {
				t.Fatalf("kubectl kustomize printed what cannot be read: %v", err)
			}
			for _, diff := range sameObjects(got, render(t, overlay)) {
				t.Error(diff)
			}
		})
	}
}

// sameObjects lists how the objects of kubectl's rendering differ from the
// pinned API's (nothing when they are the same objects, in any order).
func sameObjects(kubectl, pinned []*unstructured.Unstructured) []string {
	index := func(objs []*unstructured.Unstructured) map[string]string {
		m := map[string]string{}
		for _, o := range objs {
			data, err := json.Marshal(o.Object) // keys sorted; 1 and 1.0 alike
			if err != nil {
				data = []byte(err.Error())
			}
			m[o.GetAPIVersion()+" "+Describe(o)] = string(data)
		}
		return m
	}
	got, want := index(kubectl), index(pinned)
	var diffs []string
	for _, id := range slices.Sorted(maps.Keys(want)) {
		switch g, ok := got[id]; {
		case !ok:
			diffs = append(diffs, "kubectl's kustomize left out "+id)
		case g != want[id]:
			diffs = append(diffs, fmt.Sprintf("%s differs:\nkubectl: %s\npinned:  %s", id, g, want[id]))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, "kubectl's kustomize added "+id)
		}
	}
	if len(kubectl) != len(got) || len(pinned) != len(want) {
		diffs = append(diffs, fmt.Sprintf("objects rendered twice: kubectl %d (%d distinct), pinned %d (%d distinct)", len(kubectl), len(got), len(pinned), len(want)))
	}
	return diffs
}

func checkWebhook(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	vwc := find(objs, "ValidatingWebhookConfiguration", WebhookConfig)
	if vwc == nil {
		t.Fatal("no ValidatingWebhookConfiguration tally")
	}
	hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	if len(hooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(hooks))
	}
	h := hooks[0].(map[string]any)
	str := func(path ...string) string { s, _, _ := unstructured.NestedString(h, path...); return s }
	if _, found, _ := unstructured.NestedFieldNoCopy(h, "clientConfig", "caBundle"); found {
		t.Error("the caBundle is tally-scanner's to set")
	}
	for path, want := range map[string]string{
		"clientConfig.service.name": "tally-webhook", "clientConfig.service.namespace": Namespace,
		"clientConfig.service.path": "/validate", "failurePolicy": "Ignore", "sideEffects": "None",
	} {
		if got := str(strings.Split(path, ".")...); got != want {
			t.Errorf("webhook %s = %q, want %q", path, got, want)
		}
	}
	if port, _, _ := unstructured.NestedInt64(h, "clientConfig", "service", "port"); port != 443 {
		t.Errorf("webhook service port %d, want 443", port)
	}
	if timeout, _, _ := unstructured.NestedInt64(h, "timeoutSeconds"); timeout != 10 {
		t.Errorf("webhook timeoutSeconds %d, want 10", timeout)
	}
	sel, _, _ := unstructured.NestedSlice(h, "namespaceSelector", "matchExpressions")
	if fmt.Sprint(sel) != "[map[key:kubernetes.io/metadata.name operator:NotIn values:[tally-system]]]" {
		t.Errorf("webhook namespaceSelector %v does not exclude %s", sel, Namespace)
	}
	svc := find(objs, "Service", "tally-webhook")
	if svc == nil {
		t.Fatal("no Service tally-webhook")
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if fmt.Sprint(ports) != "[map[name:webhook port:443 protocol:TCP targetPort:webhook]]" {
		t.Errorf("Service tally-webhook ports %v", ports)
	}
	var webhookPort int64
	cports, _, _ := unstructured.NestedSlice(container(t, objs, "scanner"), "ports")
	for _, p := range cports {
		if p.(map[string]any)["name"] == "webhook" {
			webhookPort, _, _ = unstructured.NestedInt64(p.(map[string]any), "containerPort")
		}
	}
	if webhookPort != 9443 {
		t.Errorf("scanner's webhook containerPort %d, want 9443", webhookPort)
	}
}

// TestCheckLeastPrivilegeCatches proves the RBAC check fails on what it must
// refuse: each case adds one rule to the rendered standalone RBAC.
func TestCheckLeastPrivilegeCatches(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		rule       map[string]any
		want       string
	}{
		{"write pods", "ClusterRole", rule("", "pods", nil, "create"), "create pods"},
		{"wildcard verbs", "ClusterRole", rule("apps", "deployments", nil, "*"), "wildcard"},
		{"wildcard resources", "ClusterRole", rule("", "*", nil, "get"), "wildcard"},
		{"read secrets cluster-wide", "ClusterRole", rule("", "secrets", nil, "list"), "list secrets"},
		{"read any secret in the namespace", "Role", rule("", "secrets", nil, "get"), "get secrets"},
		{"leases cluster-wide", "ClusterRole", rule("coordination.k8s.io", "leases", []any{"tally-scanner"}, "update"), "cluster-wide"},
		{"any configmap", "Role", rule("", "configmaps", nil, "patch"), "not limited"},
		{"delete the state", "Role", rule("", "configmaps", []any{"tally-scan-state"}, "delete"), "only"},
		{"any webhook configuration", "ClusterRole", rule("admissionregistration.k8s.io", "validatingwebhookconfigurations", nil, "patch"), "not limited"},
		{"escalate", "ClusterRole", rule("rbac.authorization.k8s.io", "clusterroles", nil, "escalate"), "escalate"},
		{"non-resource", "ClusterRole", map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}, "non-resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, "standalone")
			if errs := CheckLeastPrivilege(objs); len(errs) != 0 {
				t.Fatalf("the shipped RBAC already fails: %v", errs)
			}
			var target *unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == tc.kind {
					target = o
					break
				}
			}
			rules, _, _ := unstructured.NestedSlice(target.Object, "rules")
			if err := unstructured.SetNestedSlice(target.Object, append(rules, tc.rule), "rules"); err != nil {
				t.Fatal(err)
			}
			errs := CheckLeastPrivilege(objs)
			if len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), tc.want) {
				t.Errorf("%s %s with %v: got %v, want an error containing %q", tc.kind, target.GetName(), tc.rule, errs, tc.want)
			}
		})
	}
}

func rule(group, resource string, names []any, verbs ...string) map[string]any {
	vs := make([]any, len(verbs))
	for i, v := range verbs {
		vs[i] = v
	}
	r := map[string]any{"apiGroups": []any{group}, "resources": []any{resource}, "verbs": vs}
	if names != nil {
		r["resourceNames"] = names
	}
	return r
}

// TestCheckRestrictedCatches proves the Pod Security check fails on a
// privileged container.
func TestCheckRestrictedCatches(t *testing.T) {
	objs := render(t, "standalone")
	d := find(objs, "Deployment", ScannerDeployment)
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	c := cs[1].(map[string]any)
	if err := unstructured.SetNestedField(c, true, "securityContext", "privileged"); err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(c, "securityContext", "capabilities")
	if err := unstructured.SetNestedSlice(d.Object, cs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	errs := CheckRestricted(objs)
	msg := fmt.Sprint(errs)
	if !strings.Contains(msg, "privileged") || !strings.Contains(msg, "capabilities") {
		t.Errorf("got %v, want privileged and capabilities violations", errs)
	}
}

// checkNetworkPolicies: ingress to tally's namespace is denied but for the
// webhook port of the scanner and the metrics port from labelled namespaces.
func checkNetworkPolicies(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	deny := find(objs, "NetworkPolicy", "tally-default-deny-ingress")
	if deny == nil {
		t.Fatal("no default-deny NetworkPolicy")
	}
	if sel, _, _ := unstructured.NestedMap(deny.Object, "spec", "podSelector"); len(sel) != 0 {
		t.Errorf("the default deny selects %v, want every Pod", sel)
	}
	if rules, found, _ := unstructured.NestedSlice(deny.Object, "spec", "ingress"); found && len(rules) > 0 {
		t.Errorf("the default deny admits %v", rules)
	}
	metrics := find(objs, "NetworkPolicy", "tally-metrics")
	if metrics == nil {
		t.Fatal("no metrics NetworkPolicy")
	}
	rules, _, _ := unstructured.NestedSlice(metrics.Object, "spec", "ingress")
	if len(rules) != 1 || !strings.Contains(fmt.Sprint(rules[0]), "tally.dev/scrape") || !strings.Contains(fmt.Sprint(rules[0]), "8080") {
		t.Errorf("metrics ingress = %v, want port 8080 from namespaces labelled tally.dev/scrape only", rules)
	}
	webhook := find(objs, "NetworkPolicy", "tally-webhook")
	if webhook == nil {
		t.Fatal("no webhook NetworkPolicy")
	}
	rules, _, _ = unstructured.NestedSlice(webhook.Object, "spec", "ingress")
	if len(rules) != 1 || fmt.Sprint(rules[0]) != "map[ports:[map[port:9443 protocol:TCP]]]" {
		t.Errorf("webhook ingress = %v, want port 9443 only", rules)
	}
}
