// Package workload is the admission benchmark's input besides the Pod
// Security Standards policies (internal/pss): realistic Pod AdmissionReviews.
package workload

import (
	"encoding/json"
	"fmt"
)

// pods are Pods as clusters hold them: an app with a sidecar and an init
// container, a hardened one, a baseline-clean one, and a privileged node agent.
var pods = []string{`{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "checkout", "labels": {"app": "checkout", "pod-template-hash": "7d9f"},
    "annotations": {"prometheus.io/scrape": "true"}},
  "spec": {
    "serviceAccountName": "checkout",
    "initContainers": [{"name": "migrate", "image": "registry.example.com/shop/migrate:1.4.2",
      "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}}}],
    "containers": [
      {"name": "app", "image": "registry.example.com/shop/checkout:1.4.2", "ports": [{"containerPort": 8080}],
       "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
       "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 1000,
         "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
       "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}]},
      {"name": "envoy", "image": "envoyproxy/envoy:v1.30.1", "ports": [{"containerPort": 15001}],
       "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}
    ],
    "volumes": [{"name": "config", "configMap": {"name": "checkout"}}, {"name": "tmp", "emptyDir": {}}]
  }}`, `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "api", "labels": {"app": "api"}},
  "spec": {
    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "api", "image": "registry.example.com/shop/api:2.0.0",
      "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
  }}`, `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "web", "labels": {"app": "web"}},
  "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}}`, `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "node-agent", "labels": {"app": "node-agent"}},
  "spec": {
    "hostNetwork": true, "hostPID": true,
    "containers": [{"name": "agent", "image": "example/agent:latest", "ports": [{"containerPort": 9100, "hostPort": 9100}],
      "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}}}],
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}]
  }}`}

// PodReview returns the i-th AdmissionReview of a stream: a CREATE of one of
// the Pods above, in namespace, with a fresh name and UID (as the API server
// sends it).
func PodReview(i int, namespace string) []byte {
	var pod map[string]any
	if err := json.Unmarshal([]byte(pods[i%len(pods)]), &pod); err != nil {
		panic(err) // constant input
	}
	md := pod["metadata"].(map[string]any)
	name := fmt.Sprintf("%s-%d", md["name"], i)
	uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	md["name"], md["namespace"], md["uid"] = name, namespace, uid
	md["creationTimestamp"] = "2026-01-01T00:00:00Z"
	review := map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid":         fmt.Sprintf("req-%d", i),
			"kind":        map[string]any{"group": "", "version": "v1", "kind": "Pod"},
			"resource":    map[string]any{"group": "", "version": "v1", "resource": "pods"},
			"requestKind": map[string]any{"group": "", "version": "v1", "kind": "Pod"},
			"name":        name, "namespace": namespace, "operation": "CREATE",
			"userInfo": map[string]any{"username": "system:serviceaccount:kube-system:replicaset-controller",
				"groups": []any{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
			"object":  pod,
			"dryRun":  false,
			"options": map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
		},
	}
	data, err := json.Marshal(review)
	if err != nil {
		panic(err)
	}
	return data
}
