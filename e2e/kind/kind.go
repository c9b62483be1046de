// Package kind runs tally on a kind cluster for e2e-framework test suites
// (`make e2e-kind`). Setup builds the node image (hack/kind/node-image.sh)
// and tally's image without a registry, creates the cluster from
// kind-config.yaml through e2e-framework's kind support, with the API server
// presenting a client certificate to webhooks, loads the image, installs
// tally with its Helm chart (standalone), waits until tally is ready, and
// Finish deletes the cluster when the suite finishes. It needs a Docker
// engine (hack/kind/docker.sh provides one) and kind (pinned: KindVersion is
// installed with `go install` when kind is not on PATH).
//
// Deploy and Render are also what the config test uses to send every
// rendered object to a real API server.
package kind

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"
	kindsupport "sigs.k8s.io/e2e-framework/support/kind"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/e2e/cluster"
)

const (
	// KindVersion is the kind release e2e-framework installs when kind is
	// not on PATH.
	KindVersion = "v0.33.0"
	// Image is the image BuildImage tags and the cluster runs.
	Image = "tally:e2e"
	// RegistryImage is the conformance suite's image registry
	// (conformance/registry), loaded beside tally's.
	RegistryImage = "tally-conformance-registry:e2e"
	// Overlay is the kustomization of the kind installation, from the
	// repository root (rendered by the config tests; Setup installs the chart).
	Overlay = "config/overlays/kind"
	// Chart is tally's Helm chart, from the repository root.
	Chart = "charts/tally"
	// ConfigFile is the kind cluster configuration, from the repository root.
	ConfigFile = "kind-config.yaml"
	// NodeImageScript builds the node image kind-config.yaml names.
	NodeImageScript = "hack/kind/node-image.sh"
	// ReadyTimeout bounds the wait for tally's Deployments and webhook.
	ReadyTimeout = 5 * time.Minute
	// webhookClientCASecret holds the CA of the API server's webhook client
	// certificate, for tally-scanner --webhook-client-ca.
	webhookClientCASecret = "tally-webhook-client-ca"
	// ExceptionNamespace is the platform's namespace of PolicyExceptions in
	// the tests' installs: its exceptions reach every namespace (the
	// chart's clusterExceptionNamespaces); a tenant's reach only its own
	// namespace (R47, issue 53). The local sharded provider takes
	// exceptions from it alone instead (--exception-namespace, Kyverno's).
	ExceptionNamespace = "conf-policy-exceptions"
)

// ClusterName is the kind cluster of a run: $TALLY_KIND_CLUSTER, or "tally".
func ClusterName() string {
	if n := os.Getenv("TALLY_KIND_CLUSTER"); n != "" {
		return n
	}
	return "tally"
}

// step prints what Setup does, so that a run's log shows each stage.
func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kind: "+format+"\n", args...)
}

// Setup builds the images, creates the kind cluster clusterName (the
// environment's kubeconfig then points at it), loads tally's image into its
// node, installs tally and waits until it is ready. When a step after the
// cluster's creation fails, the returned context still carries the cluster,
// so that Finish deletes it.
func Setup(clusterName string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		root, err := cluster.RepoRoot()
		if err != nil {
			return ctx, err
		}
		step("building the node image (%s)", NodeImageScript)
		if err := run(ctx, root, "bash", NodeImageScript); err != nil {
			return ctx, err
		}
		step("building %s from static binaries", Image)
		if err := BuildImage(ctx, root, Image); err != nil {
			return ctx, err
		}
		step("building %s (the conformance suite's image registry)", RegistryImage)
		if err := BuildStaticImage(ctx, root, RegistryImage, []string{"./conformance/registry"}, "/usr/local/bin/registry"); err != nil {
			return ctx, err
		}
		store, err := ReportsServerStore()
		if err != nil {
			return ctx, err
		}
		images := []string{Image, RegistryImage}
		var reportsServer string
		if store != "" {
			var more []string
			if reportsServer, more, err = buildReportsServerImages(ctx, root, store); err != nil {
				return ctx, err
			}
			images = append(images, more...)
		}
		var policyReporter string
		if PolicyReporterWanted() {
			if policyReporter, err = buildPolicyReporterImage(ctx, root); err != nil {
				return ctx, err
			}
			images = append(images, PolicyReporterImage)
		}
		authDir, err := os.MkdirTemp("", "tally-kind-")
		if err != nil {
			return ctx, err
		}
		ctx = context.WithValue(ctx, authDirKey{}, authDir)
		caFile, config, err := webhookClientConfig(root, authDir)
		if err != nil {
			return ctx, err
		}
		step("kind create cluster --name %s --config %s (%s with the API server's webhook client certificate)", clusterName, config, ConfigFile)
		start := time.Now()
		provider := kindsupport.NewProvider().WithVersion(KindVersion)
		ctx, err = envfuncs.CreateClusterWithConfig(provider, clusterName, config)(ctx, cfg)
		if err != nil {
			return ctx, fmt.Errorf("create kind cluster %s: %w", clusterName, err)
		}
		step("cluster %s created in %s", clusterName, time.Since(start).Round(time.Second))
		for _, image := range images {
			if ctx, err = envfuncs.LoadImageToCluster(clusterName, image)(ctx, cfg); err != nil {
				return ctx, fmt.Errorf("load %s into kind cluster %s: %w", image, clusterName, err)
			}
		}
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.KubeconfigFile())
		if err != nil {
			return ctx, fmt.Errorf("kubeconfig of kind cluster %s: %w", clusterName, err)
		}
		if err := createClientCASecret(ctx, rc, caFile); err != nil {
			return ctx, err
		}
		if store != "" {
			if err := installReportsServer(ctx, root, reportsServer, store, clusterName, cfg.KubeconfigFile(), rc); err != nil {
				return ctx, err
			}
		}
		reportAPI := "wgpolicyk8s"
		if os.Getenv("TALLY_CONFORMANCE_REPORT_API") == "openreports" {
			reportAPI = "openreports"
		}
		step("helm install tally %s --namespace %s (standalone, reports in %s)", Chart, Namespace, reportAPI)
		repo, tag, _ := strings.Cut(Image, ":")
		if err := run(ctx, root, "go", "tool", "helm", "install", "tally", Chart,
			"--kubeconfig", cfg.KubeconfigFile(), "--namespace", Namespace,
			"--set", "image.repository="+repo, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
			"--set", "webhook.clientCA.secretName="+webhookClientCASecret, "--set", "scanner.rescanEndpoint=true",
			"--set", "clusterExceptionNamespaces={"+ExceptionNamespace+"}", "--set", "mutatingAdmissionPolicyReports=true",
			"--set", "reportAPI="+reportAPI); err != nil {
			return ctx, err
		}
		start = time.Now()
		if err := WaitReady(ctx, rc, Namespace, ReadyTimeout); err != nil {
			return ctx, err
		}
		step("Deployment %s/%s (scanner and merger) Available, webhook ready (%s)", Namespace, ScannerDeployment, time.Since(start).Round(time.Second))
		if policyReporter != "" {
			if err := installPolicyReporter(ctx, root, policyReporter, cfg.KubeconfigFile(), rc); err != nil {
				return ctx, err
			}
		}
		return ctx, nil
	}
}

// authDirKey carries the folder of the webhook client files to Finish.
type authDirKey struct{}

// webhookClientConfig writes, under dir, the API server's webhook client
// certificate and AdmissionConfiguration (as the local control plane has
// them, docs/security.md) and a copy of kind-config.yaml that hands them to
// the API server (with MutatingAdmissionPolicies served, as the local
// control plane serves them, for R44): the folder is mounted at the same path in the node and in
// the kube-apiserver Pod, so the paths in the files hold everywhere. It
// returns the CA file and the kind configuration's path.
func webhookClientConfig(root, dir string) (caFile, config string, err error) {
	caFile, admission, err := cluster.WebhookClientFiles(filepath.Join(dir, "webhook-client"))
	if err != nil {
		return "", "", err
	}
	authDir := filepath.Dir(admission)
	raw, err := os.ReadFile(filepath.Join(root, ConfigFile))
	if err != nil {
		return "", "", err
	}
	var c map[string]any
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return "", "", fmt.Errorf("%s: %w", ConfigFile, err)
	}
	nodes, _ := c["nodes"].([]any)
	for _, n := range nodes {
		node, ok := n.(map[string]any)
		if !ok || node["role"] != "control-plane" {
			continue
		}
		mounts, _ := node["extraMounts"].([]any)
		node["extraMounts"] = append(mounts, map[string]any{"hostPath": authDir, "containerPath": authDir, "readOnly": true})
	}
	patches, _ := c["kubeadmConfigPatches"].([]any)
	// kind writes kubeadm's v1beta3 configuration for this Kubernetes
	// version (extraArgs a map); a patch without apiVersion matches by kind.
	c["kubeadmConfigPatches"] = append(patches, fmt.Sprintf(`kind: ClusterConfiguration
apiServer:
  extraArgs:
    admission-control-config-file: %[1]s
    feature-gates: MutatingAdmissionPolicy=true
    runtime-config: admissionregistration.k8s.io/v1beta1=true
  extraVolumes:
    - name: tally-webhook-client
      hostPath: %[2]s
      mountPath: %[2]s
      readOnly: true
      pathType: Directory
`, admission, authDir))
	out, err := yaml.Marshal(c)
	if err != nil {
		return "", "", err
	}
	config = filepath.Join(dir, "kind-config.yaml")
	return caFile, config, os.WriteFile(config, out, 0o600)
}

// createClientCASecret creates tally's namespace and the Secret the chart's
// webhook.clientCA.secretName names.
func createClientCASecret(ctx context.Context, rc *rest.Config, caFile string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace %s: %w", Namespace, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookClientCASecret, Namespace: Namespace},
		Data:       map[string][]byte{"ca.crt": ca},
	}
	if _, err := kube.CoreV1().Secrets(Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("secret %s/%s: %w", Namespace, webhookClientCASecret, err)
	}
	return nil
}

// run runs a command in dir with its output on stderr, where the run's log
// shows it; the error names the command.
func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// Start runs Setup outside an e2e-framework environment (for runners that
// are not one, such as the conformance suite's providers): it returns the
// kubeconfig file of the ready cluster and a function that runs Finish.
// When Setup fails, what it created is deleted before Start returns.
func Start(ctx context.Context, clusterName string) (kubeconfig string, stop func() error, err error) {
	cfg := envconf.New()
	ctx, err = Setup(clusterName)(ctx, cfg)
	keep := context.WithoutCancel(ctx) // the cluster is deleted even after ctx ends
	stop = func() error {
		_, err := Finish(clusterName)(keep, cfg)
		return err
	}
	if err != nil {
		if stopErr := stop(); stopErr != nil && !strings.Contains(stopErr.Error(), "context cluster is nil") {
			err = fmt.Errorf("%w (and deleting the cluster: %v)", err, stopErr)
		}
		return "", nil, err
	}
	return cfg.KubeconfigFile(), stop, nil
}

// Finish deletes the kind cluster clusterName. With $TALLY_KIND_LOGS set it
// first exports the cluster's logs (nodes, pods, tally) into that folder;
// with TALLY_KIND_KEEP=1 it keeps the cluster for inspection.
func Finish(clusterName string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		if dir := os.Getenv("TALLY_KIND_LOGS"); dir != "" {
			if c, err := envfuncs.ExportClusterLogs(clusterName, dir)(ctx, cfg); err == nil {
				ctx = c
			} else {
				fmt.Fprintf(os.Stderr, "kind: exporting logs of %s to %s: %v\n", clusterName, dir, err)
			}
		}
		if dir, ok := ctx.Value(authDirKey{}).(string); ok && os.Getenv("TALLY_KIND_KEEP") != "1" {
			defer os.RemoveAll(dir)
		}
		if os.Getenv("TALLY_KIND_KEEP") == "1" {
			fmt.Fprintf(os.Stderr, "kind: keeping cluster %s (TALLY_KIND_KEEP=1); delete it with: kind delete cluster --name %s\n", clusterName, clusterName)
			return ctx, nil
		}
		return envfuncs.DestroyCluster(clusterName)(ctx, cfg)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
