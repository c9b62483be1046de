package memstore

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchPodJSON is a Pod as the API server returns it (defaults applied),
// like those of hack/scanbench.
func benchPodJSON(i int) []byte {
	f, t := false, true
	sc := &corev1.SecurityContext{AllowPrivilegeEscalation: &f, RunAsNonRoot: &t,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	grace, prio := int64(30), int32(0)
	toleration := func(key string) corev1.Toleration {
		s := int64(300)
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s}
	}
	container := func(name, image string) corev1.Container {
		return corev1.Container{Name: name, Image: image, SecurityContext: sc, TerminationMessagePath: "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}
	}
	app := container("app", fmt.Sprintf("registry.example.com/bench/app-%d:1.%d.0", i%100, i%7))
	app.Ports = []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	p := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: fmt.Sprintf("bench-%02d", i%50),
			UID: types.UID(fmt.Sprintf("0b6f6f5e-3c1d-4c7e-9a51-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
			CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0)),
			Labels:            map[string]string{"app": fmt.Sprintf("app-%d", i%100), "team": "bench"},
			Annotations:       map[string]string{"prometheus.io/scrape": "true"}},
		Spec: corev1.PodSpec{
			Containers:    []corev1.Container{app, container("sidecar", "envoyproxy/envoy:v1.30.1")},
			Volumes:       []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			SecurityContext: &corev1.PodSecurityContext{}, SchedulerName: "default-scheduler", Priority: &prio,
			Tolerations:        []corev1.Toleration{toleration("node.kubernetes.io/not-ready"), toleration("node.kubernetes.io/unreachable")},
			EnableServiceLinks: &t, PreemptionPolicy: ptrTo(corev1.PreemptLowerPriority),
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
	}
	data, err := json.Marshal(&p)
	if err != nil {
		panic(err)
	}
	return data
}

func ptrTo[T any](v T) *T { return &v }

// pssRules are the (policy, rule) pairs the Pod Security Standards policies
// of the corpus evaluate for a Pod.
var pssRules = func() [][2]string {
	var out [][2]string
	for i := range 19 {
		out = append(out, [2]string{fmt.Sprintf("pss-policy-%02d", i*17/19), fmt.Sprintf("rule-%02d", i)})
	}
	return out
}()

// messages are shared, as the scanner interns them.
var messages = func() []string {
	var out []string
	for _, pr := range pssRules {
		out = append(out, "validation rule '"+pr[1]+"' passed.")
	}
	return out
}()

// BenchmarkStorePods stores n Pods and their 19 results each, and reports
// the live heap they take per Pod.
func BenchmarkStorePods(b *testing.B) {
	const n = 2000
	pods := make([][]byte, n)
	for i := range pods {
		pods[i] = benchPodJSON(i)
	}
	for b.Loop() {
		var before, mid, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, err := New()
		if err != nil {
			b.Fatal(err)
		}
		for i, data := range pods {
			uid := fmt.Sprintf("0b6f6f5e-3c1d-4c7e-9a51-%012d", i)
			res := NewResource(uid, "", "v1", "Pod", fmt.Sprintf("bench-%02d", i%50), fmt.Sprintf("app-%05d", i), fmt.Sprint(1000+i), 0,
				append([]byte(nil), data...))
			if err := s.Write(func(w *WriteTxn) error { return w.PutResource(res) }); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&mid)
		now := time.Now()
		for i := range pods {
			uid := fmt.Sprintf("0b6f6f5e-3c1d-4c7e-9a51-%012d", i)
			var rs []Result
			for j, pr := range pssRules {
				rs = append(rs, NewResult(Entry{Source: "kyverno", Policy: pr[0], Rule: pr[1], Category: "Pod Security Standards (Baseline)",
					Severity: "medium", Result: "pass", Scored: true, Message: messages[j], Properties: "process=background scan"}, now))
			}
			if err := s.Write(func(w *WriteTxn) error { _, err := w.SetResults(uid, rs); return err }); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(mid.HeapAlloc-before.HeapAlloc)/n, "resource-B/pod")
		b.ReportMetric(float64(after.HeapAlloc-mid.HeapAlloc)/n, "results-B/pod")
		runtime.KeepAlive(s)
	}
}

// BenchmarkResourceObject decodes a stored Pod, as each evaluation does.
func BenchmarkResourceObject(b *testing.B) {
	res := NewResource("u", "", "v1", "Pod", "bench-01", "app-00001", "1", 0, benchPodJSON(1))
	b.ReportMetric(float64(len(res.Data)), "json-B")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := res.Object(); err != nil {
			b.Fatal(err)
		}
	}
}
