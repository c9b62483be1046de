package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

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
				"scanner.scanInterval=30m", "webhook.failurePolicy=Fail", "serviceMonitor.enabled=true", "merger.replicas=3")
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
				`"failurePolicy":"Fail"`, `"kind":"ServiceMonitor"`, `"replicas":3`} {
				if !strings.Contains(all, want) {
					t.Errorf("rendered objects lack %s", want)
				}
			}
			if _, err := kind.RenderChart(ctx, root, "charts/tally", kind.Namespace, "mode=bogus"); err == nil || !strings.Contains(err.Error(), `mode "bogus"`) {
				t.Errorf("an unknown mode: %v, want an error naming it", err)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}
