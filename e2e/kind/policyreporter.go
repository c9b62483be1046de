package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// policy-reporter (kyverno/policy-reporter, built from ../shared/third_party
// by hack/thirdparty/build.sh): reads the cluster's PolicyReports (or
// OpenReports) and serves them over REST (/v1, /v2) and as Prometheus
// metrics. Every kind run installs it with its own Helm chart, REST and
// metrics on, unless TALLY_KIND_POLICY_REPORTER=0; the conformance suite
// compares its answers with tally's reports.
const (
	PolicyReporterEnv       = "TALLY_KIND_POLICY_REPORTER"
	PolicyReporterImage     = "tally.local/policy-reporter:e2e"
	PolicyReporterNamespace = "policy-reporter"
)

// PolicyReporterWanted says whether the run installs policy-reporter.
func PolicyReporterWanted() bool { return os.Getenv(PolicyReporterEnv) != "0" }

// buildPolicyReporterImage builds policy-reporter's image as its Dockerfile
// lays it out (/app/policyreporter, /app/templates, user 1234), from the
// static binary of hack/thirdparty/build.sh, and returns the build's folder.
func buildPolicyReporterImage(ctx context.Context, root string) (string, error) {
	step("building policy-reporter from its source (hack/thirdparty/build.sh, cached)")
	build, err := output(ctx, root, "bash", "hack/thirdparty/build.sh", "policy-reporter")
	if err != nil {
		return "", err
	}
	files := []ImageFile{
		{Path: "/app/policyreporter", Source: filepath.Join(build, "bin", "policy-reporter")},
		{Path: "/app/templates", Source: filepath.Join(build, "src", "templates")},
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files, ImageFile{Path: "/etc/ssl/certs/ca-certificates.crt", Source: "/etc/ssl/certs/ca-certificates.crt"})
	}
	if err := ImportImage(ctx, PolicyReporterImage, files, "1234", "/app", []string{"/app/policyreporter", "run"}); err != nil {
		return "", err
	}
	return build, nil
}

// installPolicyReporter installs policy-reporter with its chart, REST and
// metrics on (it finds the OpenReports API itself when the cluster serves
// it), and waits until it is Available.
func installPolicyReporter(ctx context.Context, root, build, kubeconfig string, rc *rest.Config) error {
	repo, tag, _ := strings.Cut(PolicyReporterImage, ":")
	registry, repository, _ := strings.Cut(repo, "/")
	set := []string{
		"image.registry=" + registry, "image.repository=" + repository, "image.tag=" + tag, "image.pullPolicy=Never",
		"rest.enabled=true", "metrics.enabled=true",
	}
	args := []string{"tool", "helm", "install", "policy-reporter", filepath.Join(build, "src", "charts", "policy-reporter"),
		"--kubeconfig", kubeconfig, "--namespace", PolicyReporterNamespace, "--create-namespace"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	step("helm install policy-reporter (REST and metrics on)")
	if err := run(ctx, root, "go", args...); err != nil {
		return err
	}
	start := time.Now()
	if err := waitDeployment(ctx, rc, PolicyReporterNamespace, "policy-reporter", 3*time.Minute); err != nil {
		return fmt.Errorf("policy-reporter: %w", err)
	}
	step("policy-reporter Available (%s)", time.Since(start).Round(time.Second))
	return nil
}
