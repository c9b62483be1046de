package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/e2e/kind"
)

// identities are the objects' kinds and names (the Namespace object left
// out: Helm installs into an existing or --create-namespace namespace).
func identities(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			out = append(out, kind.Describe(o))
		}
	}
	slices.Sort(out)
	return out
}

// TestHelmChart renders charts/tally in both modes and checks that it
// installs what the kustomize overlay of the same mode does (the same
// objects, the same RBAC files), that the real API server accepts every
// object (server-side dry run), and that the Deployments and roles pass the
// restricted Pod Security Standard and tally's least-privilege table.
func TestHelmChart(t *testing.T) {
	f := features.New("helm chart").
		Assess("each mode renders the overlay's objects, all accepted by the API server", func(ctx context.Context, t *testing.T, c *envconf.Config) context.Context {
			root, err := cluster.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			rc := c.Client().RESTConfig()
			ensureNamespace(ctx, t, rc)
			for _, tc := range []struct {
				overlay string
				set     []string
			}{
				{"standalone", nil},
				{"beside-kyverno", []string{"mode=besideKyverno"}},
			} {
				t.Run(tc.overlay, func(t *testing.T) {
					objs, err := kind.RenderChart(ctx, root, "charts/tally", kind.Namespace, tc.set...)
					if err != nil {
						t.Fatal(err)
					}
					want, err := kind.Render(overlayDir(t, tc.overlay))
					if err != nil {
						t.Fatal(err)
					}
					if got, want := identities(objs), identities(want); !slices.Equal(got, want) {
						t.Errorf("the chart renders\n  %s\nthe overlay\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
					}
					if err := kind.DeployObjects(ctx, rc, objs, true); err != nil {
						for _, line := range strings.Split(err.Error(), "\n") {
							t.Errorf("%s: %s", tc.overlay, line)
						}
					}
					for _, err := range kind.CheckRestricted(objs) {
						t.Errorf("%s: %v", tc.overlay, err)
					}
					for _, err := range kind.CheckLeastPrivilege(objs) {
						t.Errorf("%s: %v", tc.overlay, err)
					}
					t.Logf("%s: %d objects accepted by the server in dry run", tc.overlay, len(objs))
				})
			}
			return ctx
		}).
		Assess("values reach the objects", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			root, err := cluster.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			objs, err := kind.RenderChart(ctx, root, "charts/tally", kind.Namespace, "reportAPI=openreports", "image.tag=v9.9.9",
				"scanner.scanInterval=30m", "webhook.failurePolicy=Fail", "serviceMonitor.enabled=true", "scanner.replicas=3",
				"webhook.clientCA.secretName=apiserver-ca", "networkPolicy.webhookFrom={10.0.0.0/24}",
				"scanner.generateSuccessEvents=true", "scanner.omitEvents={PolicyViolation}")
			if err != nil {
				t.Fatal(err)
			}
			var text []string
			for _, o := range objs {
				data, _ := o.MarshalJSON()
				text = append(text, string(data))
			}
			all := strings.Join(text, "\n")
			for _, want := range []string{`"--report-api=openreports"`, `ghcr.io/tally-dev/tally:v9.9.9`, `"--background-scan-interval=30m"`,
				`"failurePolicy":"Fail"`, `"kind":"ServiceMonitor"`, `"replicas":3`,
				`"--webhook-client-ca=/etc/tally/webhook-client-ca/ca.crt"`, `"secretName":"apiserver-ca"`, `"ipBlock":{"cidr":"10.0.0.0/24"}`,
				`"--generate-success-events"`, `"--omit-events=PolicyViolation"`} {
				if !strings.Contains(all, want) {
					t.Errorf("rendered objects lack %s", want)
				}
			}
			without, err := kind.RenderChart(ctx, root, "charts/tally", kind.Namespace, "crds.install=false")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range without {
				if o.GetKind() == "CustomResourceDefinition" {
					t.Errorf("crds.install=false renders %s", kind.Describe(o))
				}
			}
			return ctx
		}).
		Assess("values.schema.json refuses invalid values, naming them", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			root, err := cluster.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			for set, want := range map[string]string{
				"mode=bogus":                         "/mode",
				"reportAPI=openreport":               "/reportAPI",
				"webhook.failurePolicy=Deny":         "/webhook/failurePolicy",
				"webhook.timeoutSeconds=60":          "/webhook/timeoutSeconds",
				"scanner.scanInterval=hourly":        "/scanner/scanInterval",
				"crds.install=maybe":                 "/crds/install",
				"image.tg=v1":                        "'tg' not allowed",
				"reportApi=openreports":              "'reportApi' not allowed",
				"networkPolicy.webhookFrom={any}":    "/networkPolicy/webhookFrom/0",
				"scanner.omitEvents={PolicyApplyed}": "/scanner/omitEvents/0",
			} {
				_, err := kind.RenderChart(ctx, root, "charts/tally", kind.Namespace, set)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("--set %s: %v, want an error naming %s", set, err, want)
				}
			}
			return ctx
		}).
		Assess("defaults: a versioned image, a webhook sent policy writes only, CRDs kept on uninstall", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			root, err := cluster.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			chartFile, err := os.ReadFile(filepath.Join(root, "charts", "tally", "Chart.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var chart struct {
				AppVersion string `json:"appVersion"`
			}
			if err := sigsyaml.Unmarshal(chartFile, &chart); err != nil || chart.AppVersion == "" {
				t.Fatalf("Chart.yaml appVersion %q: %v", chart.AppVersion, err)
			}
			// The chart and the overlays run the image `make image` tags by
			// default: the chart's appVersion, never latest (which the
			// shipped disallow-latest-tag sample forbids).
			wantImage := "ghcr.io/tally-dev/tally:" + chart.AppVersion
			chartObjs, err := kind.RenderChart(ctx, root, "charts/tally", kind.Namespace)
			if err != nil {
				t.Fatal(err)
			}
			sources := map[string][]*unstructured.Unstructured{"chart": chartObjs}
			for _, overlay := range []string{"standalone", "beside-kyverno"} {
				if sources[overlay], err = kind.Render(overlayDir(t, overlay)); err != nil {
					t.Fatal(err)
				}
			}
			for source, objs := range sources {
				images, webhooks := 0, 0
				for _, o := range objs {
					switch o.GetKind() {
					case "Deployment":
						containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
						for _, c := range containers {
							images++
							if image := c.(map[string]any)["image"]; image != wantImage {
								t.Errorf("%s: %s runs %v, want %s", source, kind.Describe(o), image, wantImage)
							}
							// The replicas are shards in every install: an
							// overlay that replaces the scanner's args keeps
							// --sharding (else leader election runs, one
							// active replica of two).
							if c.(map[string]any)["name"] == "scanner" {
								args, _ := json.Marshal(c.(map[string]any)["args"])
								for _, want := range []string{`"--sharding"`, `"--identity=$(POD_NAME)"`, `"--pod-uid=$(POD_UID)"`} {
									if !strings.Contains(string(args), want) {
										t.Errorf("%s: %s's scanner lacks %s: %s", source, kind.Describe(o), want, args)
									}
								}
							}
						}
					case "ValidatingWebhookConfiguration":
						// While tally-scanner is not running (no image, no
						// endpoints), only policy writes are sent to it; the
						// scanner widens the rules to what the policies match.
						hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
						for _, h := range hooks {
							webhooks++
							rules, _ := json.Marshal(h.(map[string]any)["rules"])
							if want := `[{"apiGroups":["kyverno.io"],"apiVersions":["*"],"operations":["CREATE","UPDATE"],"resources":["clusterpolicies","policies"],"scope":"*"}]`; string(rules) != want {
								t.Errorf("%s: %s starts with rules %s, want %s", source, kind.Describe(o), rules, want)
							}
						}
					case "CustomResourceDefinition":
						if source == "chart" && o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
							t.Errorf("chart: %s lacks helm.sh/resource-policy: keep (helm uninstall would delete every object of its kind)", kind.Describe(o))
						}
						// docs/install.md: kubectl delete crd -l app.kubernetes.io/part-of=tally
						if o.GetLabels()["app.kubernetes.io/part-of"] != "tally" {
							t.Errorf("%s: %s lacks the label app.kubernetes.io/part-of: tally", source, kind.Describe(o))
						}
					}
				}
				if images == 0 {
					t.Errorf("%s: no container found", source)
				}
				if source != "beside-kyverno" && webhooks != 1 {
					t.Errorf("%s: %d webhooks, want 1", source, webhooks)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}
