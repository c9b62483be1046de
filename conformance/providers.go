package conformance

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/tally-dev/tally/report"

	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
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
	// policyReporter: policy-reporter's Service exists (PolicyReporterGet).
	policyReporter bool
	found          string
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
	_, err = pk.CoreV1().Services(PolicyReporterNamespace).Get(ctx, PolicyReporterService, metav1.GetOptions{})
	d.policyReporter = err == nil
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
	if d.policyReporter {
		d.found += ", policy-reporter (Service " + PolicyReporterNamespace + "/" + PolicyReporterService + ")"
	}
	return d, nil
}

func (d *Deployed) Name() string { return d.name }

// Rename names the provider as the suite's title shows it.
func (d *Deployed) Rename(name string)   { d.name = name }
func (d *Deployed) Config() *rest.Config { return d.config }
func (d *Deployed) Can(what string) bool {
	switch what {
	case CanRestartScanner, CanRestartMerger, CanFailoverMerger, CanTally:
		return d.tally
	case CanShards:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return d.tally && d.Sharded(ctx)
	case CanPolicyReporter:
		return d.policyReporter
	}
	return false
}

// policy-reporter's Service, as its chart installs it (release
// policy-reporter): REST under /v1 and /v2, metrics under /metrics.
const (
	PolicyReporterNamespace = "policy-reporter"
	PolicyReporterService   = "policy-reporter"
	PolicyReporterPort      = 8080
)

// PolicyReporterGet reads a path of policy-reporter's Service through the
// API server's service proxy.
func (d *Deployed) PolicyReporterGet(ctx context.Context, path string, query url.Values) ([]byte, error) {
	req := d.kube.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/namespaces", PolicyReporterNamespace, "services", fmt.Sprintf("%s:%d", PolicyReporterService, PolicyReporterPort), "proxy", path)
	for key, values := range query {
		for _, v := range values {
			req = req.Param(key, v)
		}
	}
	return req.DoRaw(ctx)
}

// Sharded reports whether tally's pairs divide the namespaces (their
// membership Leases exist).
func (d *Deployed) Sharded(ctx context.Context) bool {
	list, err := d.kube.CoordinationV1().Leases(localNamespace).List(ctx, metav1.ListOptions{LabelSelector: shardMemberLabel + "=" + pairDeployment})
	return err == nil && len(list.Items) > 0
}

// shardMemberLabel labels the membership Lease of each sharded pair, with
// the shard group (the Deployment's name) as its value.
const shardMemberLabel = "tally.dev/shard-member"

func (d *Deployed) Rescan(context.Context) error { return ErrUnsupported }

// pairDeployment is tally's Deployment: each Pod runs the scanner and the
// merger beside it, under one Lease of the same name.
const pairDeployment = "tally-scanner"

// Restart deletes the Pods of the scanner and merger pair and waits until
// their Deployment is available again. Where the pairs shard the
// namespaces, it also changes them as a user's Deployment changes
// (changePairs).
func (d *Deployed) Restart(ctx context.Context, component string) error {
	if !d.tally {
		return ErrUnsupported
	}
	switch component {
	case "replica-killed", "replica-added", "replicas-rolled":
		return d.changePairs(ctx, component)
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
		members, lerr := d.kube.CoordinationV1().Leases(localNamespace).List(ctx, metav1.ListOptions{LabelSelector: shardMemberLabel + "=" + name})
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

// changePairs carries out the "shards" restarts on the Deployment:
// replica-killed deletes a Pod at once (SIGKILL: its membership Lease is
// left to expire) and scales the Deployment down by one, so that it is not
// replaced (a replacement the ReplicaSet made meanwhile, not ready, is the
// one the scale-down deletes); replica-added scales it up by one;
// replicas-rolled is a rollout restart (a new Pod template), each Pod
// replaced by the Deployment's rolling update.
func (d *Deployed) changePairs(ctx context.Context, change string) error {
	if !d.Sharded(ctx) {
		return fmt.Errorf("restart %s: the pairs do not shard: %w", change, ErrUnsupported)
	}
	deployments := d.kube.AppsV1().Deployments(localNamespace)
	scale, err := deployments.GetScale(ctx, pairDeployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var victim string
	switch change {
	case "replica-killed":
		if scale.Spec.Replicas < 2 {
			return fmt.Errorf("%s: %d pair(s), want two at least", change, scale.Spec.Replicas)
		}
		// The victim is a ready Pod (a member Lease may outlive its Pod
		// until the garbage collector deletes it).
		pods, err := d.kube.CoreV1().Pods(localNamespace).List(ctx, metav1.ListOptions{LabelSelector: scale.Status.Selector})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && PodReady(&p) && p.Name > victim {
				victim = p.Name
			}
		}
		if victim == "" {
			return fmt.Errorf("%s: no ready Pod of %s", change, pairDeployment)
		}
		if err := d.kube.CoreV1().Pods(localNamespace).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			return fmt.Errorf("%s: %w", change, err)
		}
		// The scale-down comes once the ReplicaSet replaced the Pod: it
		// then deletes that replacement (not ready), never a survivor it
		// would still count beside a victim it had not seen go.
		if err := d.waitReplaced(ctx, scale.Status.Selector, victim, int(scale.Spec.Replicas)); err != nil {
			return fmt.Errorf("%s: %w", change, err)
		}
	case "replica-added":
	case "replicas-rolled":
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"conformance.tally.dev/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
		if _, err := deployments.Patch(ctx, pairDeployment, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("%s: %w", change, err)
		}
		return d.waitRolledOut(ctx, pairDeployment)
	}
	delta := int32(1)
	if change == "replica-killed" {
		delta = -1
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := deployments.GetScale(ctx, pairDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas += delta
		_, err = deployments.UpdateScale(ctx, pairDeployment, scale, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: scaling by %d: %w", change, delta, err)
	}
	if err := d.waitRolledOut(ctx, pairDeployment); err != nil || change != "replica-killed" {
		return err
	}
	// The killed Pod's membership Lease goes with it (its owner): the
	// garbage collector deletes it.
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := d.kube.CoordinationV1().Leases(localNamespace).Get(ctx, shardLeasePrefix+victim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("%s: the membership Lease of the killed Pod %s is still there a minute later (the Pod should own it: tally-scanner --pod-uid)", change, victim)
	}
	return nil
}

// shardLeasePrefix names a member's Lease: the prefix and its identity
// (its Pod's name).
const shardLeasePrefix = "tally-member-"

// PodReady reports whether a Pod runs and is ready.
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReplaced waits until the Pods of selector, victim and those being
// deleted aside, are replicas again.
func (d *Deployed) waitReplaced(ctx context.Context, selector, victim string, replicas int) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := d.kube.CoreV1().Pods(localNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		n := 0
		for _, p := range pods.Items {
			if p.Name != victim && p.DeletionTimestamp == nil {
				n++
			}
		}
		return n >= replicas, nil
	})
}

// waitRolledOut waits until every Pod of the Deployment is of its newest
// template and available, and no other is left (as kubectl rollout status,
// and the old Pods gone).
func (d *Deployed) waitRolledOut(ctx context.Context, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		dep, err := d.kube.AppsV1().Deployments(localNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		want, st := *dep.Spec.Replicas, dep.Status
		last = fmt.Sprintf("generation %d observed %d; %d replicas: %d updated, %d available, %d in all", dep.Generation, st.ObservedGeneration, want, st.UpdatedReplicas, st.AvailableReplicas, st.Replicas)
		if st.ObservedGeneration < dep.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
			return false, nil
		}
		pods, err := d.kube.CoreV1().Pods(localNamespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(dep.Spec.Selector)})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last += fmt.Sprintf("; %d Pods", len(pods.Items))
		return len(pods.Items) == int(want), nil
	})
	if err != nil {
		return fmt.Errorf("deployment %s not rolled out (%s): %w", name, last, err)
	}
	return nil
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
