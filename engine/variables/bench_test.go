package variables

import "testing"

// benchData is a request for a typical Pod, with numbers as the API server's
// JSON decoding gives them (int64).
var benchData = map[string]any{
	"request": map[string]any{
		"operation": "CREATE",
		"namespace": "shop",
		"object": map[string]any{
			"apiVersion": "v1",
			"kind":       "Pod",
			"metadata": map[string]any{
				"name": "web-7d4b9c", "namespace": "shop",
				"labels":      map[string]any{"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c"},
				"annotations": map[string]any{"prometheus.io/scrape": "true"},
			},
			"spec": map[string]any{
				"containers": []any{
					map[string]any{"name": "web", "image": "nginx:1.25", "ports": []any{map[string]any{"containerPort": int64(80)}},
						"resources": map[string]any{"limits": map[string]any{"memory": "256Mi", "cpu": "500m"}}},
					map[string]any{"name": "sidecar", "image": "busybox:1.36",
						"resources": map[string]any{"requests": map[string]any{"memory": "64Mi"}}},
				},
				"securityContext": map[string]any{"runAsNonRoot": true, "runAsUser": int64(1000)},
			},
		},
	},
}

func BenchmarkSubstitute(b *testing.B) {
	cases := map[string]any{
		"message with 2 variables": "Pod {{ request.object.metadata.name }} in {{ request.namespace }} must not use the latest tag.",
		"pattern with 2 variables": map[string]any{"metadata": map[string]any{
			"labels":    map[string]any{"app": "{{ request.object.metadata.labels.app }}"},
			"namespace": "{{ request.namespace }}",
		}, "spec": map[string]any{"containers": []any{map[string]any{"image": "!*:latest"}}}},
		"lone variable with a function": "{{ request.object.spec.containers[].resources.limits.memory | [0] | divide(@, '1Mi') }}",
	}
	for name, v := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Substitute(v, benchData); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkQuery(b *testing.B) {
	cases := map[string]string{
		"simple path":          "request.object.metadata.name",
		"projection":           "request.object.spec.containers[].image",
		"filter on int64 data": "request.object.spec.containers[?ports[?containerPort > `79`]].name",
		"custom function":      "to_upper(request.object.metadata.labels.app)",
	}
	for name, expr := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Query(expr, benchData); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
