package pattern

import "testing"

// benchPod is a realistic Pod: three containers with resources, probes,
// environment, ports and security contexts.
const benchPod = `
apiVersion: v1
kind: Pod
metadata:
  name: web-7d9f8c6b5-x2x9z
  namespace: shop
  labels: {app.kubernetes.io/name: web, app.kubernetes.io/part-of: shop, pod-template-hash: 7d9f8c6b5}
  annotations: {prometheus.io/scrape: "true", prometheus.io/port: "9090"}
spec:
  serviceAccountName: web
  securityContext: {runAsNonRoot: true, runAsUser: 1000, fsGroup: 2000, seccompProfile: {type: RuntimeDefault}}
  volumes:
  - {name: tmp, emptyDir: {}}
  - {name: config, configMap: {name: web-config}}
  initContainers:
  - name: migrate
    image: registry.example.com/shop/migrate:1.4.2
    securityContext: {allowPrivilegeEscalation: false, runAsUser: 1000, capabilities: {drop: [ALL]}}
  containers:
  - name: web
    image: registry.example.com/shop/web:2.3.1
    ports: [{containerPort: 8080, name: http}]
    env: [{name: LOG_LEVEL, value: info}, {name: DB_HOST, value: db.shop.svc}]
    resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {cpu: "1", memory: 512Mi}}
    readinessProbe: {httpGet: {path: /healthz, port: 8080}}
    securityContext: {allowPrivilegeEscalation: false, privileged: false, runAsUser: 1000, capabilities: {drop: [ALL]}}
    volumeMounts: [{name: tmp, mountPath: /tmp}]
  - name: metrics
    image: registry.example.com/shop/exporter:0.9.0
    ports: [{containerPort: 9090, name: metrics}]
    resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {cpu: 100m, memory: 128Mi}}
    securityContext: {allowPrivilegeEscalation: false, runAsUser: 1001, capabilities: {drop: [ALL]}}
  - name: proxy
    image: registry.example.com/mesh/proxy:1.20.3
    resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {cpu: 500m, memory: 256Mi}}
    securityContext: {allowPrivilegeEscalation: false, runAsUser: 1337, capabilities: {drop: [ALL]}}
`

var benchPatterns = map[string]string{
	// The Pod Security Standards "restricted" run-as-non-root rule.
	"run-as-non-root": `
spec:
  =(securityContext):
    =(runAsUser): ">0"
  =(ephemeralContainers):
  - =(securityContext):
      =(runAsUser): ">0"
  =(initContainers):
  - =(securityContext):
      =(runAsUser): ">0"
  containers:
  - =(securityContext):
      =(runAsUser): ">0"
`,
	// The "baseline" seccomp rule: alternatives on every level.
	"seccomp": `
spec:
  =(securityContext):
    =(seccompProfile):
      =(type): "RuntimeDefault | Localhost"
  =(ephemeralContainers):
  - =(securityContext):
      =(seccompProfile):
        =(type): "RuntimeDefault | Localhost"
  =(initContainers):
  - =(securityContext):
      =(seccompProfile):
        =(type): "RuntimeDefault | Localhost"
  containers:
  - =(securityContext):
      =(seccompProfile):
        =(type): "RuntimeDefault | Localhost"
`,
	// Requests and limits with quantities, negation anchors and wildcards.
	"resources": `
metadata:
  labels:
    app.kubernetes.io/*: "?*"
spec:
  =(volumes):
  - X(hostPath): "null"
  containers:
  - name: "*"
    image: "!*:latest"
    resources:
      requests: {memory: "?*", cpu: "?*"}
      limits: {memory: "<=1Gi"}
`,
	// A conditional anchor skipping one container and checking the others.
	"conditional": `
spec:
  containers:
  - (name): "!proxy"
    securityContext:
      runAsUser: "1000-1100"
`,
	// A failing rule: the cost includes explaining the failure.
	"failing": `
spec:
  containers:
  - securityContext:
      runAsUser: ">1001"
`,
}

func BenchmarkValidate(b *testing.B) {
	pod := fromYAML(b, benchPod)
	for _, name := range []string{"run-as-non-root", "seccomp", "resources", "conditional", "failing"} {
		pat := fromYAML(b, benchPatterns[name])
		want := Pass
		if name == "failing" {
			want = Fail
		}
		if got := Validate(pod, pat); got.Status != want {
			b.Fatalf("%s: got %v (%s: %s), want %v", name, got.Status, got.Path, got.Message, want)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Validate(pod, pat)
			}
		})
	}
}

func BenchmarkMatchValue(b *testing.B) {
	cases := map[string][2]any{
		"wildcard":     {"registry.example.com/shop/web:2.3.1", "!*:latest"},
		"alternatives": {"RuntimeDefault", "RuntimeDefault | Localhost"},
		"quantity":     {"512Mi", "<=1Gi"},
		"number":       {int64(1000), ">0"},
	}
	for name, c := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				MatchValue(c[0], c[1])
			}
		})
	}
}
