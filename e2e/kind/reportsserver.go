package kind

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tally-dev/tally/e2e/reportsserver"
)

// reports-server (kyverno/reports-server, built from ../shared/third_party by
// hack/thirdparty/build.sh): an aggregated API server that stores the
// report kinds (wgpolicyk8s.io, openreports.io, reports.kyverno.io) in a
// store of its own instead of the cluster's etcd. A kind run installs it,
// before tally, with its own Helm chart when TALLY_KIND_REPORTS_SERVER names
// a store: tally writes its reports unchanged, and every report the suite
// reads carries ReportsServerAnnotation.
const (
	// ReportsServerEnv chooses the store: etcd (the chart's etcd
	// StatefulSet, running the node image's etcd) or postgres (PostgreSQL
	// from Debian's packages, as an external database the chart points at).
	ReportsServerEnv = "TALLY_KIND_REPORTS_SERVER"
	// ReportsServerNamespace is the chart's release name and namespace (its
	// etcd StatefulSet is put in the namespace named after the release).
	ReportsServerNamespace = reportsserver.Namespace
	// ReportsServerImage is reports-server's binary, imported.
	ReportsServerImage = "tally.local/reports-server:e2e"
	// ReportsServerEtcdImage is the image the chart's etcd StatefulSet
	// names; the kind run tags the node image's etcd (the integration
	// tests' v3.6.5, hack/controlplane/build.sh) with it.
	ReportsServerEtcdImage = "quay.io/coreos/etcd:v3.5.15"
	// PostgresImage is PostgreSQL from Debian's packages (hack/thirdparty/postgres-image.sh).
	PostgresImage = "tally.local/postgresql:e2e"
	// postgresPassword is the chart's default database password.
	postgresPassword = "reports"
)

// ReportsServerStore is the store of the run's reports-server: "", etcd or
// postgres.
func ReportsServerStore() (string, error) {
	switch s := os.Getenv(ReportsServerEnv); s {
	case "", "etcd", "postgres":
		return s, nil
	default:
		return "", fmt.Errorf("%s=%q: want etcd or postgres", ReportsServerEnv, s)
	}
}

// output runs a command in dir and returns its standard output, trimmed
// (its standard error goes to the run's log).
func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// buildReportsServerImages builds the images of store's installation and
// returns the folder of reports-server's build (its chart is under src/)
// and the images to load.
func buildReportsServerImages(ctx context.Context, root, store string) (string, []string, error) {
	step("building reports-server from its source (hack/thirdparty/build.sh, cached)")
	build, err := output(ctx, root, "bash", "hack/thirdparty/build.sh", "reports-server")
	if err != nil {
		return "", nil, err
	}
	if err := ImportImage(ctx, ReportsServerImage, []ImageFile{{Path: "/usr/local/bin/reports-server", Source: filepath.Join(build, "bin", "reports-server")}},
		"65532:65532", "", []string{"/usr/local/bin/reports-server"}); err != nil {
		return "", nil, err
	}
	images := []string{ReportsServerImage}
	switch store {
	case "etcd":
		bin, err := output(ctx, root, "bash", "hack/controlplane/build.sh", "etcd")
		if err != nil {
			return "", nil, err
		}
		// Root, as the image the chart names runs.
		if err := ImportImage(ctx, ReportsServerEtcdImage, []ImageFile{{Path: "/usr/local/bin/etcd", Source: filepath.Join(bin, "etcd")}},
			"", "", []string{"/usr/local/bin/etcd"}); err != nil {
			return "", nil, err
		}
		images = append(images, ReportsServerEtcdImage)
	case "postgres":
		step("building %s from Debian's packages (hack/thirdparty/postgres-image.sh, cached)", PostgresImage)
		if err := run(ctx, root, "bash", "hack/thirdparty/postgres-image.sh", PostgresImage); err != nil {
			return "", nil, err
		}
		images = append(images, PostgresImage)
	}
	return build, images, nil
}

// installReportsServer installs reports-server with its chart, on store,
// and waits until the API server serves the report groups through it.
func installReportsServer(ctx context.Context, root, build, store, clusterName, kubeconfig string, rc *rest.Config) error {
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	repo, tag, _ := strings.Cut(ReportsServerImage, ":")
	registry, repository, _ := strings.Cut(repo, "/")
	set := []string{
		"image.registry=" + registry, "image.repository=" + repository, "image.tag=" + tag, "image.pullPolicy=Never",
		"postgresql.enabled=false",
	}
	switch store {
	case "etcd":
		if err := etcdVolumes(ctx, kube); err != nil {
			return err
		}
		set = append(set, "config.etcd.enabled=true")
	case "postgres":
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ReportsServerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := ApplyObjects(ctx, rc, postgresObjects(), "tally-e2e"); err != nil {
			return fmt.Errorf("PostgreSQL for reports-server: %w", err)
		}
		if err := waitDeployment(ctx, rc, ReportsServerNamespace, "postgresql", 3*time.Minute); err != nil {
			return fmt.Errorf("PostgreSQL for reports-server: %w", err)
		}
		set = append(set, "config.db.host=postgresql."+ReportsServerNamespace, "config.db.password="+postgresPassword)
	}
	args := []string{"tool", "helm", "install", ReportsServerNamespace, filepath.Join(build, "src", "charts", "reports-server"),
		"--kubeconfig", kubeconfig, "--namespace", ReportsServerNamespace, "--create-namespace"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	step("helm install reports-server (%s store)", store)
	if err := run(ctx, root, "go", args...); err != nil {
		return err
	}
	start := time.Now()
	if err := waitDeployment(ctx, rc, ReportsServerNamespace, ReportsServerNamespace, 5*time.Minute); err != nil {
		return err
	}
	if err := forgetEarlyConnections(ctx, kube, clusterName); err != nil {
		return err
	}
	if err := reportsserver.WaitAvailable(ctx, rc, 3*time.Minute, nil); err != nil {
		return err
	}
	step("reports-server serves the report APIs (%s)", time.Since(start).Round(time.Second))
	return nil
}

// forgetEarlyConnections drops the node's connection-tracking entries of
// reports-server's Service address. reports-server registers its
// APIServices the moment it starts, and the API server's availability check
// may connect to the Service's ClusterIP before kube-proxy has programmed
// it: the connection then leaves the node untranslated, and on machines
// whose network answers any address's port 443 (these CI machines: HTTP
// 404) the API server keeps that connection, and the APIServices stay
// FailedDiscoveryCheck (404) for ever. Once reports-server's Pod is ready
// kube-proxy has long programmed the address; dropping the entries breaks
// the stray connection and the next check reaches reports-server.
func forgetEarlyConnections(ctx context.Context, kube kubernetes.Interface, clusterName string) error {
	svc, err := kube.CoreV1().Services(ReportsServerNamespace).Get(ctx, ReportsServerNamespace, metav1.GetOptions{})
	if err != nil {
		return err
	}
	node := clusterName + "-control-plane"
	out, err := exec.CommandContext(ctx, "docker", "exec", node, "conntrack", "-D", "-d", svc.Spec.ClusterIP).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "0 flow entries") {
		return fmt.Errorf("conntrack -D -d %s in %s: %w: %s", svc.Spec.ClusterIP, node, err, out)
	}
	return nil
}

// etcdVolumes provides the volumes of the chart's etcd StatefulSet (three
// members, 1Gi each): the node image runs no volume provisioner, so a
// hostPath PersistentVolume is bound ahead to each claim, as an operator
// without dynamic provisioning does.
func etcdVolumes(ctx context.Context, kube kubernetes.Interface) error {
	class := ""
	scs, err := kube.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, sc := range scs.Items {
		if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			class = sc.Name
		}
	}
	hostPath := corev1.HostPathDirectoryOrCreate
	for i := range 3 {
		name := fmt.Sprintf("reports-server-etcd-%d", i)
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              class,
				ClaimRef:                      &corev1.ObjectReference{Namespace: ReportsServerNamespace, Name: fmt.Sprintf("etcd-data-etcd-%d", i)},
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: "/var/local/" + name, Type: &hostPath},
				},
			},
		}
		if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("PersistentVolume %s: %w", name, err)
		}
	}
	return nil
}

// postgresObjects are PostgreSQL's Deployment and Service for
// reports-server's database: the database and password the chart's values
// name, data on an emptyDir (the run's cluster is thrown away after).
func postgresObjects() []*unstructured.Unstructured {
	labels := map[string]any{"app": "postgresql"}
	dep := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "postgresql", "namespace": ReportsServerNamespace},
		"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"containers": []any{map[string]any{
						"name": "postgresql", "image": PostgresImage, "imagePullPolicy": "Never",
						"env": []any{
							map[string]any{"name": "POSTGRES_PASSWORD", "value": postgresPassword},
							map[string]any{"name": "POSTGRES_DB", "value": "reportsdb"},
							map[string]any{"name": "PGDATA", "value": "/var/lib/postgresql/data"},
						},
						"ports":          []any{map[string]any{"name": "postgresql", "containerPort": int64(5432)}},
						"readinessProbe": map[string]any{"tcpSocket": map[string]any{"port": int64(5432)}, "periodSeconds": int64(2)},
						"volumeMounts": []any{
							map[string]any{"name": "data", "mountPath": "/var/lib/postgresql"},
							map[string]any{"name": "run", "mountPath": "/var/run/postgresql"},
						},
					}},
					"volumes": []any{
						map[string]any{"name": "data", "emptyDir": map[string]any{}},
						map[string]any{"name": "run", "emptyDir": map[string]any{}},
					},
				},
			},
		},
	}
	svc := map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "postgresql", "namespace": ReportsServerNamespace},
		"spec": map[string]any{
			"selector": labels,
			"ports":    []any{map[string]any{"name": "postgresql", "port": int64(5432), "targetPort": int64(5432)}},
		},
	}
	return []*unstructured.Unstructured{{Object: dep}, {Object: svc}}
}
