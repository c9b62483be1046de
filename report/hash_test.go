package report

import (
	"encoding/json"
	"testing"
)

func samplePod() map[string]any {
	var obj map[string]any
	_ = json.Unmarshal([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-7d9f8c6b5-x2k4z","namespace":"prod","uid":"0b6f3a2e-1c4d-4e5f-8a9b-0c1d2e3f4a5b",
"resourceVersion":"123456","generation":1,"labels":{"app":"web","team":"a","pod-template-hash":"7d9f8c6b5"},
"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"big\":\"json\"}"},
"managedFields":[{"manager":"kubelet","operation":"Update","apiVersion":"v1"}],
"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8c6b5","uid":"1","controller":true}]},
"spec":{"containers":[{"name":"app","image":"registry.example.com/web:1.2.3","ports":[{"containerPort":8080}],
"resources":{"requests":{"cpu":"100m","memory":"128Mi"},"limits":{"memory":"256Mi"}},
"securityContext":{"runAsNonRoot":true,"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}],
"serviceAccountName":"web","nodeName":"node-1"},"status":{"phase":"Running"}}`), &obj)
	return obj
}

func TestContentHashIgnoresWhatChangesOnEveryWrite(t *testing.T) {
	base, err := ContentHash(samplePod())
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		change func(map[string]any)
		same   bool
	}{
		"a new resourceVersion":      {func(o map[string]any) { o["metadata"].(map[string]any)["resourceVersion"] = "9" }, true},
		"new managedFields":          {func(o map[string]any) { o["metadata"].(map[string]any)["managedFields"] = []any{} }, true},
		"a status change":            {func(o map[string]any) { o["status"] = map[string]any{"phase": "Failed"} }, true},
		"no last-applied annotation": {func(o map[string]any) { delete(o["metadata"].(map[string]any), "annotations") }, true},
		"a label change":             {func(o map[string]any) { o["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = "b" }, false},
		"an image change": {func(o map[string]any) {
			o["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"] = "registry.example.com/web:1.2.4"
		}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := samplePod()
			tc.change(obj)
			h, err := ContentHash(obj)
			if err != nil {
				t.Fatal(err)
			}
			if (h == base) != tc.same {
				t.Errorf("hash equal = %v, want %v", h == base, tc.same)
			}
		})
	}
}

func BenchmarkContentHash(b *testing.B) {
	obj := samplePod()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ContentHash(obj); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAdmissionHashIgnoresWhatSubresourcesWrite(t *testing.T) {
	pod := func(node string) map[string]any {
		spec := map[string]any{"containers": []any{map[string]any{"name": "app", "image": "nginx"}}}
		if node != "" {
			spec["nodeName"] = node
		}
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}, "spec": spec}
	}
	created, _ := AdmissionHash(pod(""))
	bound, _ := AdmissionHash(pod("node-1"))
	if created != bound {
		t.Error("binding the Pod to a node changed its admission hash")
	}
	if c, _ := ContentHash(pod("")); c != created {
		t.Error("an unbound Pod's admission hash differs from its content hash")
	}
	if c, _ := ContentHash(pod("node-1")); c == bound {
		t.Error("the content hash ignores spec.nodeName: the scanner would not see the binding")
	}
	deploy := func(replicas int64, image string) map[string]any {
		return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"},
			"spec": map[string]any{"replicas": replicas, "template": map[string]any{"spec": map[string]any{"image": image}}}}
	}
	one, _ := AdmissionHash(deploy(1, "a"))
	three, _ := AdmissionHash(deploy(3, "a"))
	other, _ := AdmissionHash(deploy(1, "b"))
	if one != three || one == other {
		t.Errorf("Deployment admission hashes: replicas 1 %x, 3 %x, other image %x", one, three, other)
	}
	// A ConfigMap's fields all count.
	cm := map[string]any{"kind": "ConfigMap", "spec": map[string]any{"replicas": int64(1)}}
	cm2 := map[string]any{"kind": "ConfigMap", "spec": map[string]any{"replicas": int64(2)}}
	a, _ := AdmissionHash(cm)
	b, _ := AdmissionHash(cm2)
	if a == b {
		t.Error("a kind without a scale subresource lost spec.replicas from its hash")
	}
}

func TestHashesSeeWhatAdmissionHashLeavesOut(t *testing.T) {
	pod := func(node string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"},
			"spec": map[string]any{"nodeName": node, "containers": []any{}}}
	}
	c1, a1, err := Hashes(pod("node-1"))
	if err != nil {
		t.Fatal(err)
	}
	c2, a2, _ := Hashes(pod("node-2"))
	if a1 != a2 {
		t.Error("the admission hash depends on the node")
	}
	if c1 == c2 || c1 == a1 {
		t.Error("the content hash does not see the node: the scanner would not rescan a rebound Pod")
	}
	cm := map[string]any{"kind": "ConfigMap", "data": map[string]any{"a": "b"}}
	c, a, _ := Hashes(cm)
	full, _ := ContentHash(cm)
	if c != a || c != full {
		t.Errorf("a ConfigMap's hashes differ: content %x admission %x ContentHash %x", c, a, full)
	}
}
