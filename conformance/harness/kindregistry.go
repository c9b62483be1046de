package harness

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/tally-dev/tally/conformance"
	"github.com/tally-dev/tally/e2e/kind"
)

// registryNamespace holds the suite's image registry on kind.
const registryNamespace = "tally-conformance-registry"

// startRegistry runs the suite's image registry (kind.RegistryImage, loaded
// by kind.Setup) as a Pod on the node's network and returns its address,
// the node's IP and port, which the scanner reaches over plain HTTP: the
// scanner refuses registries on the cluster's Pod and Service ranges
// (issue 53), and a registry of the nodes' network is what a cluster's
// own registry usually is.
func startRegistry(ctx context.Context, kube kubernetes.Interface) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: registryNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	f, uid := false, int64(65532)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "registry", Namespace: registryNamespace, Labels: map[string]string{"app": "conformance-registry"}},
		Spec: corev1.PodSpec{
			HostNetwork: true,
			Containers: []corev1.Container{{
				Name: "registry", Image: kind.RegistryImage, ImagePullPolicy: corev1.PullNever,
				Ports: []corev1.ContainerPort{{ContainerPort: 5000}, {ContainerPort: 5001}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(5001)}},
					PeriodSeconds: 1},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, RunAsUser: &uid, RunAsNonRoot: func() *bool { t := true; return &t }(),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			}},
		},
	}
	if _, err := kube.CoreV1().Pods(registryNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("the suite's image registry: %w", err)
	}
	var ip string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(registryNamespace).Get(ctx, "registry", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ip = p.Status.HostIP
		return conformance.PodReady(p) && ip != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("the suite's image registry (Pod %s/registry) is not ready: %w", registryNamespace, err)
	}
	return ip + ":5000", nil
}
