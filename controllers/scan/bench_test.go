package scan

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/internal/pss"
	"github.com/tally-dev/tally/memstore"

	"github.com/tally-dev/tally/internal/corpus"
)

var gvrPods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// benchPod is a Pod as the API server returns it; one in ten is privileged,
// one in five runs as root (as in hack/scanbench).
func benchPod(tb testing.TB, i int) *unstructured.Unstructured {
	f, t := false, true
	sc := &corev1.SecurityContext{AllowPrivilegeEscalation: &f, RunAsNonRoot: &t,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if i%10 == 0 {
		sc = &corev1.SecurityContext{Privileged: &t}
	} else if i%5 == 0 {
		sc.RunAsNonRoot = nil
	}
	grace := int64(30)
	c := func(name, image string) corev1.Container {
		return corev1.Container{Name: name, Image: image, SecurityContext: sc, TerminationMessagePath: "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}
	}
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: fmt.Sprintf("bench-%02d", i%50),
			UID: types.UID(fmt.Sprintf("0b6f6f5e-3c1d-4c7e-9a51-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
			Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%100), "team": "bench"}, Annotations: map[string]string{"prometheus.io/scrape": "true"}},
		Spec: corev1.PodSpec{
			Containers:    []corev1.Container{c("app", fmt.Sprintf("registry.example.com/bench/app-%d:1.%d.0", i%100, i%7)), c("sidecar", "envoyproxy/envoy:v1.30.1")},
			Volumes:       []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			SchedulerName: "default-scheduler",
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		tb.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// BenchmarkRescan is a forced full rescan with nothing changed: every stored
// Pod decoded and evaluated against the Pod Security Standards policies, its
// results merged into the store, its report digested (and not written).
// It measures the engine and the store together, without the API server.
func BenchmarkRescan(b *testing.B) {
	const pods = 1000
	s, ctx := rescanBench(b, pods)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if err := s.RescanAll(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*pods)/time.Since(start).Seconds(), "pods/s")
}

// BenchmarkPolicyScan is one policy's periodic scan (what an idle scanner
// does 17 times an hour with the Pod Security Standards policies): that
// policy evaluated on every Pod, nothing changed, nothing written.
func BenchmarkPolicyScan(b *testing.B) {
	const pods = 1000
	s, ctx := rescanBench(b, pods)
	tp := s.handlers.policies.get("disallow-capabilities")
	if tp == nil {
		b.Fatal("no policy disallow-capabilities")
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if err := s.evaluator.scanPolicy(ctx, tp); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*pods)/time.Since(start).Seconds(), "pods/s")
}

// rescanBench is a scanner holding pods Pods, the Pod Security Standards
// policies and the results of a first full scan.
func rescanBench(b *testing.B, pods int) (*Scanner, context.Context) {
	policies := pss.Load(b, corpus.Path(b, "policy-library", "pod-security"))
	client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	store, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	s := New(client, nil, store, Options{Workers: 1, Registry: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	for _, gvr := range []schema.GroupVersionResource{apiresources.ClusterPolicy, apiresources.Policy, apiresources.PolicyException, apiresources.Namespace} {
		s.handlers.kinds.synced[sourceKey{gvr: gvr}] = true
	}
	s.handlers.kinds.remember(gvrPods, "", "Pod")
	for _, p := range policies {
		tp := newTracked(p.Name, apiresources.ClusterPolicy, p)
		for _, r := range p.Rules {
			tp.ruleKinds[r.Name] = []schema.GroupVersionResource{gvrPods}
		}
		s.handlers.policies.put(tp)
	}
	for i := range pods {
		s.handlers.upsertResource(context.Background(), gvrPods, benchPod(b, i))
	}
	if err := s.RescanAll(ctx); err != nil { // the first scan writes the reports (to the fake client)
		b.Fatal(err)
	}
	n, _ := store.Read().CountResults("fail")
	b.Logf("%d pods, %d policies, %d fail results", pods, len(policies), n)
	return s, ctx
}
