package kind

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/e2e/cluster"
)

// `make chart-version VERSION=...` sets the chart's version and appVersion
// and the image tag of every container of the kustomize Deployment (the
// scanner's and the merger's, one Pod), on a copy of those files.
func TestMakeChartVersion(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"Makefile", "charts/tally/Chart.yaml", "config/scanner/deployment.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("make", "-C", dir, "chart-version", "VERSION=v9.8.7")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make chart-version: %v\n%s", err, out)
	}
	chart, err := os.ReadFile(filepath.Join(dir, "charts/tally/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(chart), "\nversion: 9.8.7\n") || !strings.Contains(string(chart), `appVersion: "v9.8.7"`) {
		t.Errorf("Chart.yaml not set to 9.8.7 / v9.8.7:\n%s", chart)
	}
	deploy, err := os.ReadFile(filepath.Join(dir, "config/scanner/deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(deploy), "image: ghcr.io/tally-dev/tally:v9.8.7"); n != 2 {
		t.Errorf("%d containers tagged v9.8.7, want 2 (scanner and merger)", n)
	}
}
