package podsecurity

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

// benchPod is a realistic application Pod: an init container, the app and a
// sidecar, with resources, env, probes, mounts and volumes; it meets the
// restricted level.
const benchPod = `apiVersion: v1
kind: Pod
metadata:
  name: shop-7d9f8c6b5-x2k4p
  namespace: shop
  labels: {app: shop, pod-template-hash: 7d9f8c6b5}
  annotations: {prometheus.io/scrape: "true", prometheus.io/port: "9090"}
spec:
  serviceAccountName: shop
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    fsGroup: 10001
    seccompProfile: {type: RuntimeDefault}
  initContainers:
  - name: migrate
    image: registry.example.com/shop/migrate:1.4.2
    command: [/migrate, up]
    env: [{name: DB_URL, valueFrom: {secretKeyRef: {name: db, key: url}}}]
    resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 128Mi}}
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
  containers:
  - name: app
    image: registry.example.com/shop/app:1.4.2
    args: [--port=8080, --metrics=9090]
    ports: [{name: http, containerPort: 8080}, {name: metrics, containerPort: 9090}]
    env:
    - {name: LOG_LEVEL, value: info}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {cpu: "1", memory: 512Mi}}
    livenessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 10}
    readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 5}
    volumeMounts: [{name: config, mountPath: /etc/shop}, {name: tmp, mountPath: /tmp}]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
  - name: proxy
    image: envoyproxy/envoy:v1.31.0
    ports: [{name: proxy, containerPort: 15001}]
    resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 128Mi}}
    volumeMounts: [{name: envoy, mountPath: /etc/envoy}]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}}
  volumes:
  - {name: config, configMap: {name: shop}}
  - {name: envoy, configMap: {name: envoy}}
  - {name: tmp, emptyDir: {medium: Memory, sizeLimit: 64Mi}}
  - name: token
    projected: {sources: [{serviceAccountToken: {path: token, expirationSeconds: 3600}}]}
`

// BenchmarkEvaluate measures the hot path: a compiled rule evaluated on a
// pod read once (what the engine does for every podSecurity rule of a
// resource), and, apart, reading the pod and a failing evaluation.
func BenchmarkEvaluate(b *testing.B) {
	obj := object(b, benchPod)
	pod, err := PodOf("Pod", obj)
	if err != nil {
		b.Fatal(err)
	}
	for _, level := range []string{"baseline", "restricted"} {
		c, err := Compile(kyvernov1.PodSecurity{Level: level, Version: "latest"})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(level, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := c.EvaluatePod(pod); !r.Pass {
					b.Fatal(r.Message)
				}
			}
		})
	}
	b.Run("restricted with exclusions, failing", func(b *testing.B) {
		bad := object(b, benchPod)
		containers := dig(bad, "spec")["containers"].([]any)
		containers[1].(map[string]any)["securityContext"] = map[string]any{"privileged": true, "runAsUser": int64(0)}
		badPod, err := PodOf("Pod", bad)
		if err != nil {
			b.Fatal(err)
		}
		c, err := Compile(restricted(ex("Privileged Containers", []string{"envoyproxy/*"}, ""), ex("Capabilities", []string{"envoyproxy/*"}, "")))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if r := c.EvaluatePod(badPod); r.Pass {
				b.Fatal("passes")
			}
		}
	})
	b.Run("PodOf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := PodOf("Pod", obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	// References for PodOf: converting the whole spec, and JSON.
	b.Run("PodOf reference: whole spec converted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var spec corev1.PodSpec
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj["spec"].(map[string]any), &spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PodOf reference: JSON round trip", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := json.Marshal(obj["spec"])
			if err != nil {
				b.Fatal(err)
			}
			var spec corev1.PodSpec
			if err := json.Unmarshal(data, &spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
