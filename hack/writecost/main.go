// Command writecost measures what one report object costs the API server:
// the CPU of creating it and the heap it keeps (its watch cache entry and
// what goes with it), for the shapes tally and Kyverno write and for the
// shapes an intermediate report could take (results packed in one string,
// one report for many resources). It starts the local control plane,
// creates the objects of --objects resources of each shape one at a time
// (each shape twice, interleaved, in namespaces of their own), forces a
// garbage collection in the API server (/debug/pprof/heap?gc=1) to read its
// live heap, then deletes them one at a time (what an intermediate report
// deleted once merged adds). It also creates PolicyViolation Events as
// tally-scanner sends them (protobuf). Every figure is per resource.
//
//	TALLY_CONTROLPLANE_ASSETS=$(bash hack/controlplane/build.sh) go run ./hack/writecost [--only REGEXP]
//
// --only measures the shapes whose names match (for a quick comparison of
// two of them in one run).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
	// packed: the results of perObject resources (1 when zero) are one
	// string (an annotation: the CRD schema would prune an unknown field),
	// not entries: what a report costs when its results are opaque to the
	// API server. The costs are then given per resource.
	packed    bool
	perObject int
	// bare: no labels or annotations, a spec with only its owner (which the
	// CRD requires): the least a kept object costs.
	bare bool
}

func (s shape) resources() int { return max(s.perObject, 1) }

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
	{name: "BackgroundScanReport, bare (name and namespace only)", gvr: gvrBSR, kind: "BackgroundScanReport", entry: slimEntry, bare: true},
	{name: "BackgroundScanReport, no results", gvr: gvrBSR, kind: "BackgroundScanReport", entry: slimEntry},
	{name: "BackgroundScanReport, 20 entries with timestamp and scored (before)", gvr: gvrBSR, kind: "BackgroundScanReport", entries: 20, entry: timedEntry},
	{name: "BackgroundScanReport, 20 entries without (now)", gvr: gvrBSR, kind: "BackgroundScanReport", entries: 20, entry: slimEntry},
	{name: "BackgroundScanReport, 20 results packed in one string", gvr: gvrBSR, kind: "BackgroundScanReport", entries: 20, entry: slimEntry, packed: true},
	{name: "one report for 10 resources, 20 results each packed (per resource)", gvr: gvrBSR, kind: "BackgroundScanReport", entries: 20, entry: slimEntry, packed: true, perObject: 10},
	{name: "one report for 50 resources, 20 results each packed (per resource)", gvr: gvrBSR, kind: "BackgroundScanReport", entries: 20, entry: slimEntry, packed: true, perObject: 50},
	{name: "PolicyReport, 20 entries (tally's and Kyverno's)", gvr: gvrPR, kind: "PolicyReport", entries: 20, entry: fullEntry},
}

// pack writes n results as lines of tab-separated fields: what the
// results of a resource take when the API server sees one string.
func pack(s shape) string {
	var b strings.Builder
	for r := range s.resources() {
		fmt.Fprintf(&b, "%d\n", r)
		for i := range s.entries {
			e := s.entry(i)
			fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", e["policy"], e["rule"], e["result"], e["message"])
		}
	}
	return b.String()
}

func object(s shape, namespace, name string) map[string]any {
	owner := map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "app-" + name[len(name)-5:], "uid": name}
	if s.bare {
		return map[string]any{"apiVersion": "kyverno.io/v2", "kind": s.kind,
			"metadata": map[string]any{"name": name, "namespace": namespace}, "spec": map[string]any{"owner": owner}}
	}
	results := make([]any, s.entries)
	for i := range results {
		results[i] = s.entry(i)
	}
	if s.packed {
		results = nil
	}
	summary := map[string]any{"pass": int64(s.entries), "fail": int64(0), "warn": int64(0), "error": int64(0), "skip": int64(0)}
	labels := map[string]any{"app.kubernetes.io/managed-by": "tally"}
	meta := map[string]any{"name": name, "namespace": namespace, "labels": labels}
	if s.gvr == gvrPR {
		return map[string]any{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": s.kind, "metadata": meta,
			"scope": owner, "results": results, "summary": summary}
	}
	labels["audit.kyverno.io/resource.uid"] = name
	labels["audit.kyverno.io/resource.hash"] = "3f2a9c1d5e7b8a60"
	labels["audit.kyverno.io/resource.gvr"] = "pods.v1"
	annotations := map[string]any{"reports.tally.dev/changed-at": "1795577752.596752795"}
	if s.packed {
		annotations["reports.tally.dev/results"] = pack(s)
	}
	meta["annotations"] = annotations
	return map[string]any{"apiVersion": "kyverno.io/v2", "kind": s.kind, "metadata": meta,
		"spec": map[string]any{"owner": owner, "results": results, "summary": summary}}
}

func main() {
	n := flag.Int("objects", 2000, "resources of each shape per batch (their objects hold one or more each)")
	only := flag.String("only", "", "measure only the shapes whose name matches this regular expression (the Events' name is \""+eventShape+"\")")
	flag.Parse()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "writecost: --only:", err)
			os.Exit(2)
		}
		var kept []shape
		for _, s := range shapes {
			if re.MatchString(s.name) {
				kept = append(kept, s)
			}
		}
		shapes, withEvents = kept, re.MatchString(eventShape)
	}
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "writecost:", err)
		os.Exit(1)
	}
}

// withEvents: measure the scanner's Events too.
var withEvents = true

const eventShape = "Event (PolicyViolation, protobuf)"

func run(n int) error {
	ctx := context.Background()
	c, err := benchutil.StartCluster(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	kube, dyn := c.Kube, c.Dyn
	// Events go as protobuf, as tally-scanner sends them.
	pcfg := rest.CopyConfig(c.Config)
	pcfg.ContentType, pcfg.AcceptContentTypes = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf
	pkube, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return err
	}
	liveHeap := func() (float64, error) { return benchutil.APIServerLiveHeap(ctx, kube) }
	apiCPU := func() float64 { return benchutil.ChildCPU()["kube-apiserver"] }
	fmt.Printf("%d resources per batch, objects created one at a time; costs per resource\n", n)
	type batch struct {
		s         shape
		ns        string
		names     []string
		createCPU float64
		heap      float64
	}
	var batches []batch
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
			cpu0 := apiCPU()
			size := 0
			objects := n / s.resources()
			names := make([]string, objects)
			for i := range objects {
				names[i] = fmt.Sprintf("2f0e5a3c-1111-2222-3333-%012d", i)
				obj := object(s, ns, names[i])
				if i == 0 {
					data, _ := (&unstructured.Unstructured{Object: obj}).MarshalJSON()
					size = len(data)
				}
				if _, err := dyn.Resource(s.gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: "writecost"}); err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
			}
			cpu1 := apiCPU()
			h1, err := liveHeap()
			if err != nil {
				return err
			}
			per := float64(objects * s.resources())
			b := batch{s: s, ns: ns, names: names, createCPU: (cpu1 - cpu0) * 1000 / per, heap: (h1 - h0) / per / 1024}
			batches = append(batches, b)
			fmt.Printf("%-72s %6d B of JSON an object: API server CPU %5.2f ms per create, live heap +%4.1f KiB\n",
				s.name, size, b.createCPU, b.heap)
		}
		if !withEvents {
			continue
		}
		ns := fmt.Sprintf("writecost-%d-events", round)
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		h0, err := liveHeap()
		if err != nil {
			return err
		}
		cpu0 := apiCPU()
		for i := range n {
			if _, err := pkube.CoreV1().Events(ns).Create(ctx, event(ns, i), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("event: %w", err)
			}
		}
		cpu1 := apiCPU()
		h1, err := liveHeap()
		if err != nil {
			return err
		}
		fmt.Printf("%-72s %6s                  : API server CPU %5.2f ms per create, live heap +%4.1f KiB\n",
			eventShape, "", (cpu1-cpu0)*1000/float64(n), (h1-h0)/float64(n)/1024)
	}
	// Deletes come last, so that the heap figures above are not mixed with
	// what deleted objects free.
	fmt.Println("deleted one at a time (what an intermediate report deleted once merged adds):")
	for _, b := range batches {
		cpu0 := apiCPU()
		for _, name := range b.names {
			if err := dyn.Resource(b.s.gvr).Namespace(b.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("%s: delete: %w", b.s.name, err)
			}
		}
		fmt.Printf("%-72s API server CPU %5.2f ms per delete\n", b.s.name, (apiCPU()-cpu0)*1000/float64(len(b.names)*b.s.resources()))
	}
	return nil
}

// event is a PolicyViolation Event as tally-scanner emits one for a failed
// background result: on the resource, naming the policy and rule.
func event(namespace string, i int) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("app-%d.%x", i, i*7919), Namespace: namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: fmt.Sprintf("app-%d", i), UID: "2f0e5a3c-1111-2222-3333-444455556666"},
		Reason:         "PolicyViolation", Type: corev1.EventTypeWarning, Count: 1,
		Message: fmt.Sprintf("Pod %s/app-%d: [privileged-containers] fail; validation error: Privileged mode is disallowed.", namespace, i),
		Source:  corev1.EventSource{Component: "tally-scanner"}, FirstTimestamp: now, LastTimestamp: now,
	}
}
