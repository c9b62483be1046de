// Command writecost measures what one report object costs the API server:
// the CPU of creating it and the heap it keeps (its watch cache entry and
// what goes with it), for the shapes tally and Kyverno write. It starts the
// local control plane, creates --objects objects of each shape one at a time
// (each shape twice, interleaved, in namespaces of their own), and after each
// batch forces a garbage collection in the API server
// (/debug/pprof/heap?gc=1) to read its live heap.
//
//	TALLY_CONTROLPLANE_ASSETS=$(bash hack/controlplane/build.sh) go run ./hack/writecost
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/hack/benchutil"
)

// shape is one kind of report object: entries results like the Pod
// Security Standards give a Pod.
type shape struct {
	name    string
	gvr     schema.GroupVersionResource
	kind    string
	entries int
	entry   func(i int) map[string]any
}

var (
	gvrBSR = schema.GroupVersionResource{Group: "kyverno.io", Version: "v2", Resource: "backgroundscanreports"}
	gvrPR  = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
)

func slimEntry(i int) map[string]any {
	return map[string]any{"source": "kyverno", "policy": fmt.Sprintf("disallow-policy-%d", i), "rule": fmt.Sprintf("rule-number-%d", i),
		"result": "pass", "message": fmt.Sprintf("validation rule 'rule-number-%d' passed.", i)}
}

// fullEntry is an entry with every field Kyverno writes in a PolicyReport
// (tally's final reports are the same).
func fullEntry(i int) map[string]any {
	e := timedEntry(i)
	e["category"], e["severity"] = "Pod Security Standards (Baseline)", "medium"
	e["properties"] = map[string]any{"process": "background scan"}
	return e
}

// timedEntry is a BackgroundScanReport entry as tally wrote it before issue
// 16's second cut: with its timestamp and scored.
func timedEntry(i int) map[string]any {
	e := slimEntry(i)
	e["scored"] = true
	e["timestamp"] = map[string]any{"seconds": int64(1795577752), "nanos": int64(596752795)}
	return e
}

var shapes = []shape{
	{"BackgroundScanReport, no results", gvrBSR, "BackgroundScanReport", 0, slimEntry},
	{"BackgroundScanReport, 20 entries with timestamp and scored (before)", gvrBSR, "BackgroundScanReport", 20, timedEntry},
	{"BackgroundScanReport, 20 entries without (now)", gvrBSR, "BackgroundScanReport", 20, slimEntry},
	{"PolicyReport, 20 entries (tally's and Kyverno's)", gvrPR, "PolicyReport", 20, fullEntry},
}

func object(s shape, namespace, name string) map[string]any {
	results := make([]any, s.entries)
	for i := range results {
		results[i] = s.entry(i)
	}
	summary := map[string]any{"pass": int64(s.entries), "fail": int64(0), "warn": int64(0), "error": int64(0), "skip": int64(0)}
	labels := map[string]any{"app.kubernetes.io/managed-by": "tally"}
	meta := map[string]any{"name": name, "namespace": namespace, "labels": labels}
	owner := map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "app-" + name[len(name)-5:], "uid": name}
	if s.gvr == gvrPR {
		return map[string]any{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": s.kind, "metadata": meta,
			"scope": owner, "results": results, "summary": summary}
	}
	labels["audit.kyverno.io/resource.uid"] = name
	labels["audit.kyverno.io/resource.hash"] = "3f2a9c1d5e7b8a60"
	labels["audit.kyverno.io/resource.gvr"] = "pods.v1"
	meta["annotations"] = map[string]any{"reports.tally.dev/changed-at": "1795577752.596752795"}
	return map[string]any{"apiVersion": "kyverno.io/v2", "kind": s.kind, "metadata": meta,
		"spec": map[string]any{"owner": owner, "results": results, "summary": summary}}
}

func main() {
	n := flag.Int("objects", 2000, "objects of each shape per batch")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "writecost:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx := context.Background()
	c, err := benchutil.StartCluster(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	kube, dyn := c.Kube, c.Dyn
	liveHeap := func() (float64, error) { return benchutil.APIServerLiveHeap(ctx, kube) }
	fmt.Printf("%d objects per batch, created one at a time\n", n)
	for round := range 2 {
		for si, s := range shapes {
			ns := fmt.Sprintf("writecost-%d-%d", round, si)
			if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			h0, err := liveHeap()
			if err != nil {
				return err
			}
			cpu0 := benchutil.ChildCPU()["kube-apiserver"]
			size := 0
			for i := range n {
				obj := object(s, ns, fmt.Sprintf("2f0e5a3c-1111-2222-3333-%012d", i))
				if i == 0 {
					data, _ := (&unstructured.Unstructured{Object: obj}).MarshalJSON()
					size = len(data)
				}
				if _, err := dyn.Resource(s.gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: "writecost"}); err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
			}
			cpu1 := benchutil.ChildCPU()["kube-apiserver"]
			h1, err := liveHeap()
			if err != nil {
				return err
			}
			fmt.Printf("%-70s %5d B of JSON: API server CPU %.2f ms per create, live heap +%.1f KiB per object\n",
				s.name, size, (cpu1-cpu0)*1000/float64(n), (h1-h0)/float64(n)/1024)
		}
	}
	return nil
}
