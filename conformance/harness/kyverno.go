package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/tally-dev/tally/e2e/cluster"
)

// The real Kyverno (issue 55): v1.19.0 built from the Go module proxy by
// hack/kyverno/build.sh, its admission and background controllers run as
// processes on the
// local control plane, under their own ServiceAccounts with the RBAC of
// Kyverno's own install (config/install-latest-testing.yaml of the module:
// its chart rendered), and the arguments and environment of its
// Deployments there. The admission controller registers its webhooks with
// an URL (--serverIP 127.0.0.1:<port>): the API server calls it on
// loopback.

// kyvernoNamespace is the namespace of Kyverno's install.
const kyvernoNamespace = "kyverno"

// Kyverno's processes, by the Deployment of its install each runs as.
var kyvernoDeployments = map[string]string{
	"kyverno-admission":  "kyverno-admission-controller",
	"kyverno-background": "kyverno-background-controller",
	"kyverno-reports":    "kyverno-reports-controller",
}

// kyvernoBinaries are the commands of hack/kyverno/build.sh, by process.
var kyvernoBinaries = map[string]string{
	"kyverno-admission":  "kyverno",
	"kyverno-background": "background-controller",
	"kyverno-reports":    "reports-controller",
}

// realKyverno is Kyverno's build and what its install says to run.
type realKyverno struct {
	// build is hack/kyverno/build.sh's folder: bin/, src/.
	build string
	// containers are the Deployments' first containers, by process.
	containers map[string]container
	// kubeconfigs are the ServiceAccounts' kubeconfigs, by process.
	kubeconfigs map[string]string
}

type container struct {
	args []string
	env  []string
}

// buildKyverno runs hack/kyverno/build.sh (cached outside the clone).
func buildKyverno(ctx context.Context, root string, commands ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "hack", "kyverno", "build.sh")}, commands...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/kyverno/build.sh: %w\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// installKyverno installs Kyverno's install (its CRDs over tally's of the
// same kinds, its namespace, ServiceAccounts, RBAC and ConfigMaps; not its
// Deployments, Services and Jobs, which run here as processes), and writes
// a kubeconfig per ServiceAccount.
func (l *Local) installKyverno(ctx context.Context, k *realKyverno) error {
	data, err := os.ReadFile(filepath.Join(k.build, "src", "config", "install-latest-testing.yaml"))
	if err != nil {
		return fmt.Errorf("kyverno's install: %w", err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("kyverno's install: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
	k.containers = map[string]container{}
	dyn, err := dynamic.NewForConfig(l.cluster.Config)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(l.cluster.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	// Kyverno's CRDs (its module's config/crds), over tally's of the same
	// kinds, established before their objects; then the rest.
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			for process, deployment := range kyvernoDeployments {
				if u.GetName() == deployment {
					k.containers[process] = containerOf(u)
				}
			}
		}
	}
	for _, group := range []string{"kyverno", "policies.kyverno.io", "policyreport", "reports"} {
		if err := cluster.InstallCRDsFrom(l.cluster.Config, filepath.Join(k.build, "src", "config", "crds", group)); err != nil {
			return fmt.Errorf("kyverno's CRDs: %w", err)
		}
	}
	mapper.Reset()
	for _, u := range objs {
		switch u.GetKind() {
		case "CustomResourceDefinition", "Deployment", "Service", "Job", "CronJob", "PodDisruptionBudget", "ServiceMonitor":
			continue
		}
		m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		if err != nil {
			return fmt.Errorf("kyverno's %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		body, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("kyverno's %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	for process := range kyvernoDeployments {
		if _, ok := k.containers[process]; !ok {
			return fmt.Errorf("kyverno's install has no Deployment %s", kyvernoDeployments[process])
		}
	}
	k.kubeconfigs = map[string]string{}
	for process, deployment := range kyvernoDeployments {
		// The ServiceAccount of each controller is named as its Deployment.
		tr, err := l.kube.CoreV1().ServiceAccounts(kyvernoNamespace).CreateToken(ctx, deployment,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](48 * 3600)}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("a token of ServiceAccount %s/%s: %w", kyvernoNamespace, deployment, err)
		}
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: l.cluster.Config.Host, CertificateAuthorityData: l.cluster.Config.CAData}
		cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		cfg.CurrentContext = "c"
		path := filepath.Join(l.dir, deployment+".kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return err
		}
		k.kubeconfigs[process] = path
	}
	return nil
}

// containerOf reads the arguments and environment of a Deployment's first
// container (a fieldRef's value as the Pod would see it).
func containerOf(u *unstructured.Unstructured) container {
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	var c container
	if len(cs) == 0 {
		return c
	}
	m, _ := cs[0].(map[string]any)
	args, _ := m["args"].([]any)
	for _, a := range args {
		if s, ok := a.(string); ok {
			c.args = append(c.args, s)
		}
	}
	env, _ := m["env"].([]any)
	for _, e := range env {
		em, _ := e.(map[string]any)
		name, _ := em["name"].(string)
		value, hasValue := em["value"].(string)
		if !hasValue {
			switch path, _, _ := unstructured.NestedString(em, "valueFrom", "fieldRef", "fieldPath"); path {
			case "metadata.namespace":
				value = kyvernoNamespace
			case "metadata.name":
				value = u.GetName() + "-0"
			}
		}
		c.env = append(c.env, name+"="+value)
	}
	return c
}

// kyvernoArgs are a Kyverno process's command line: its Deployment's
// arguments, with what a process beside the control plane needs instead
// of a Pod's: its kubeconfig, loopback ports, the webhooks called by URL,
// the TUF root in its own folder, and the exceptions the suite's installs
// take.
func (l *Local) kyvernoArgs(name string) (binary string, args, env []string) {
	k := l.kyverno
	c := k.containers[name]
	drop := map[string]bool{"--metricsPort": true, "--controllerRuntimeMetricsAddress": true, "--servicePort": true, "--webhookServerPort": true,
		"--enablePolicyException": true, "--exceptionNamespace": true, "--otelConfig": true, "--disableMetrics": true}
	for _, a := range c.args {
		if flag, _, _ := strings.Cut(a, "="); !drop[flag] {
			args = append(args, a)
		}
	}
	args = append(args, "--kubeconfig="+k.kubeconfigs[name],
		"--disableMetrics=false", "--otelConfig=prometheus", "--metricsPort="+strconv.Itoa(l.port(name)),
		// PolicyExceptions, as the suite's installs of tally take them.
		"--enablePolicyException=true")
	if slices.ContainsFunc(c.args, func(a string) bool { return strings.HasPrefix(a, "--controllerRuntimeMetricsAddress") }) {
		args = append(args, "--controllerRuntimeMetricsAddress=0")
	}
	if name == "kyverno-admission" {
		port := strconv.Itoa(l.port("kyverno-webhook"))
		args = append(args, "--serverIP=127.0.0.1:"+port, "--servicePort="+port, "--webhookServerPort="+port, "--webhookServerHost=127.0.0.1")
	}
	env = append([]string{"TUF_ROOT=" + filepath.Join(l.dir, "sigstore-"+name), "HOME=" + l.dir}, c.env...)
	return filepath.Join(k.build, "bin", kyvernoBinaries[name]), args, env
}

// waitKyvernoServing waits until Kyverno's admission controller serves:
// it leads (its Lease kyverno/kyverno renewed after since), has registered
// its policy webhook with a CA bundle, and completes a TLS handshake on its
// webhook port (its serving certificate is in place). After an API server
// restart it may lose its Lease and exit (as a Pod's container would, and
// be started again): the wait covers that too.
func (l *Local) waitKyvernoServing(ctx context.Context, since time.Time) error {
	port := strconv.Itoa(l.port("kyverno-webhook"))
	var why string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := l.kube.CoordinationV1().Leases(kyvernoNamespace).Get(ctx, "kyverno", metav1.GetOptions{})
		if err != nil || lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(since) {
			why = "its Lease kyverno/kyverno is not renewed"
			return false, nil
		}
		vwc, err := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "kyverno-policy-validating-webhook-cfg", metav1.GetOptions{})
		if err != nil || len(vwc.Webhooks) == 0 || len(vwc.Webhooks[0].ClientConfig.CABundle) == 0 {
			why = "its policy webhook is not registered"
			return false, nil
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", "127.0.0.1:"+port, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe: the API server checks the CA bundle
		if err != nil {
			why = "its webhook does not complete a TLS handshake: " + err.Error()
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kyverno's admission controller does not serve: %s (logs: %s): %w", why, filepath.Join(l.dir, "kyverno-admission.log"), err)
	}
	return nil
}
