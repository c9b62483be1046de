package kind

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Names of what config/ deploys.
const (
	Namespace = "tally-system"
	// ScannerDeployment runs tally: each Pod holds the scanner and, beside
	// it, the merger (MergerContainer).
	ScannerDeployment = "tally-scanner"
	MergerContainer   = "merger"
	WebhookConfig     = "tally"
)

// WaitReady waits until the Deployment in namespace is Available with
// every replica updated, and, when the ValidatingWebhookConfiguration "tally"
// exists, until tally-scanner has set the caBundle of each of its webhooks.
// The error says what was still missing.
func WaitReady(ctx context.Context, cfg *rest.Config, namespace string, timeout time.Duration) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var missing string
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{ScannerDeployment} {
			d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				missing = fmt.Sprintf("Deployment %s/%s: %v", namespace, name, err)
				return false, nil
			}
			if why := notAvailable(d); why != "" {
				missing = fmt.Sprintf("Deployment %s/%s: %s", namespace, name, why)
				return false, nil
			}
		}
		vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, WebhookConfig, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil // an installation without tally's webhook (beside-kyverno)
		}
		if err != nil {
			missing = fmt.Sprintf("ValidatingWebhookConfiguration %s: %v", WebhookConfig, err)
			return false, nil
		}
		for _, w := range vwc.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				missing = fmt.Sprintf("ValidatingWebhookConfiguration %s: webhook %s has no caBundle yet", WebhookConfig, w.Name)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("tally not ready after %s: %s: %w", timeout, missing, err)
	}
	return nil
}

// waitDeployment waits until the Deployment namespace/name is Available
// with every replica updated.
func waitDeployment(ctx context.Context, cfg *rest.Config, namespace, name string, timeout time.Duration) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var missing string
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			missing = err.Error()
			return false, nil
		}
		missing = notAvailable(d)
		return missing == "", nil
	})
	if err != nil {
		return fmt.Errorf("Deployment %s/%s not ready after %s: %s: %w", namespace, name, timeout, missing, err)
	}
	return nil
}

// notAvailable says why a Deployment is not fully rolled out and available,
// or returns "".
func notAvailable(d *appsv1.Deployment) string {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.ObservedGeneration < d.Generation {
		return "rollout not observed yet"
	}
	if d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want {
		return fmt.Sprintf("%d/%d replicas updated, %d available", d.Status.UpdatedReplicas, want, d.Status.AvailableReplicas)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return fmt.Sprintf("Available=%s: %s", c.Status, c.Message)
		}
	}
	return "no Available condition yet"
}
