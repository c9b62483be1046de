package conformance

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/tally-dev/tally/report"

	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// localNamespace is tally's namespace in every installation.
const localNamespace = "tally-system"

// ReportAPIFromEnv reads TALLY_CONFORMANCE_REPORT_API: the API the final
// reports are written in and read from (wgpolicyk8s, the default, or
// openreports).
func ReportAPIFromEnv() (report.API, error) {
	api, err := report.ParseAPI(os.Getenv("TALLY_CONFORMANCE_REPORT_API"))
	if err != nil {
		return "", fmt.Errorf("TALLY_CONFORMANCE_REPORT_API: %w", err)
	}
	return api, nil
}

// Deployed is a cluster where the implementation runs as Deployments (tally
// from config/, or Kyverno): reached through a kubeconfig. When tally's
// Deployments exist in tally-system, restarts and failovers delete their
// Pods; otherwise the cases that need them are skipped.
type Deployed struct {
	name   string
	config *rest.Config
	kube   kubernetes.Interface
	tally  bool
	found  string
}

// Found says which cluster and reporting implementation the provider found.
func (d *Deployed) Found() string { return d.found }

// NewDeployed connects to the cluster of a kubeconfig file; ctx bounds
// the first calls that find what it runs.
func NewDeployed(ctx context.Context, name, kubeconfig string) (*Deployed, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return NewDeployedFromConfig(ctx, name, cfg)
}

// NewDeployedFromConfig connects to a cluster.
func NewDeployedFromConfig(ctx context.Context, name string, cfg *rest.Config) (*Deployed, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	d := &Deployed{name: name, config: cfg, kube: kube}
	// First: does the cluster answer at all? One clear line if not.
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 10 * time.Second
	pk, err := kubernetes.NewForConfig(probe)
	if err != nil {
		return nil, err
	}
	version, err := pk.Discovery().ServerVersion() // bounded by probe.Timeout
	if err != nil {
		return nil, fmt.Errorf("cannot reach the cluster at %s: %v", cfg.Host, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pk.AppsV1().Deployments(localNamespace).Get(ctx, "tally-scanner", metav1.GetOptions{})
	d.tally = err == nil
	d.found = "Kubernetes " + version.GitVersion + ", "
	switch {
	case d.tally:
		d.found += "tally (Deployment " + localNamespace + "/tally-scanner)"
	default:
		deps, err := pk.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=kyverno"})
		var names []string
		if err == nil {
			for _, dep := range deps.Items {
				names = append(names, dep.Namespace+"/"+dep.Name)
			}
		}
		if len(names) > 0 {
			d.found += "Kyverno (" + strings.Join(names, ", ") + ")"
		} else {
			d.found += "no known reporting implementation (neither tally-system/tally-scanner nor Deployments labelled app.kubernetes.io/part-of=kyverno)"
		}
	}
	return d, nil
}

func (d *Deployed) Name() string         { return d.name }
func (d *Deployed) Config() *rest.Config { return d.config }
func (d *Deployed) Can(what string) bool {
	switch what {
	case CanRestartScanner, CanRestartMerger, CanFailoverMerger, CanTally:
		return d.tally
	}
	return false
}
func (d *Deployed) Rescan(context.Context) error { return ErrUnsupported }

// pairDeployment is tally's Deployment: each Pod runs the scanner and the
// merger beside it, under one Lease of the same name.
const pairDeployment = "tally-scanner"

// Restart deletes the Pods of the scanner and merger pair and waits until
// their Deployment is available again.
func (d *Deployed) Restart(ctx context.Context, component string) error {
	if !d.tally {
		return ErrUnsupported
	}
	name := pairDeployment
	dep, err := d.kube.AppsV1().Deployments(localNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	sel := metav1.FormatLabelSelector(dep.Spec.Selector)
	if err := d.kube.CoreV1().Pods(localNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		return err
	}
	return d.waitAvailable(ctx, name)
}

// Failover deletes the Pod holding the pair's Lease: a standby Pod's
// scanner takes it, scans, and its merger writes. Where the pairs shard
// the namespaces (no such Lease; a membership Lease each), it deletes the
// Pod of the first member: the others take its namespaces, and the Pod
// that replaces it takes its share back.
func (d *Deployed) Failover(ctx context.Context, component string) error {
	if !d.tally {
		return ErrUnsupported
	}
	name := pairDeployment
	lease, err := d.kube.CoordinationV1().Leases(localNamespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		members, lerr := d.kube.CoordinationV1().Leases(localNamespace).List(ctx, metav1.ListOptions{LabelSelector: "tally.dev/shard-member=" + name})
		if lerr != nil {
			return lerr
		}
		if len(members.Items) == 0 {
			return fmt.Errorf("failover: neither the Lease %s nor a membership Lease exists", name)
		}
		lease, err = &members.Items[0], nil
	}
	if err != nil {
		return err
	}
	if lease.Spec.HolderIdentity == nil {
		return fmt.Errorf("failover: nobody holds the Lease %s", lease.Name)
	}
	holder := *lease.Spec.HolderIdentity
	if err := d.kube.CoreV1().Pods(localNamespace).Delete(ctx, holder, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return err
	}
	return d.waitAvailable(ctx, name)
}

func (d *Deployed) waitAvailable(ctx context.Context, name string) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, false, func(ctx context.Context) (bool, error) {
		dep, err := d.kube.AppsV1().Deployments(localNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range dep.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == "True" {
				return dep.Status.ReadyReplicas == *dep.Spec.Replicas, nil
			}
		}
		return false, nil
	})
}

func (d *Deployed) PolicyLoaded(_ context.Context, policy *unstructured.Unstructured) (bool, error) {
	return StatusReady(policy), nil
}
