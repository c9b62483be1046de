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
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/hack/benchutil"
	"github.com/tally-dev/tally/report"
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

// pack gives the results of a shape's resources in the encoding the
// scanner packs them in (report.PackResults: a JSON array of entries), one
// array a resource when the report holds several. It applies no size limit:
// a report for 50 resources takes more than report.MaxPackedResults, less
// than the API server's 256 KiB of annotations.
func pack(s shape) (string, error) {
	perResource := make([][]map[string]any, s.resources())
	for r := range perResource {
		for i := range s.entries {
			perResource[r] = append(perResource[r], s.entry(i))
		}
	}
	var v any = perResource
	if s.perObject == 0 {
		v = perResource[0]
	}
	packed, err := json.Marshal(v)
	return string(packed), err
}

func object(s shape, namespace, name string) (map[string]any, error) {
	owner := map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "app-" + name[len(name)-5:], "uid": name}
	if s.bare {
		return map[string]any{"apiVersion": "kyverno.io/v2", "kind": s.kind,
			"metadata": map[string]any{"name": name, "namespace": namespace}, "spec": map[string]any{"owner": owner}}, nil
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
			"scope": owner, "results": results, "summary": summary}, nil
	}
	labels["audit.kyverno.io/resource.uid"] = name
	labels["audit.kyverno.io/resource.hash"] = "3f2a9c1d5e7b8a60"
	labels["audit.kyverno.io/resource.gvr"] = "pods.v1"
	annotations := map[string]any{report.AnnotationChangedAt: "1795577752.596752795"}
	if s.packed {
		packed, err := pack(s)
		if err != nil {
			return nil, err
		}
		annotations[report.AnnotationResults] = packed
	}
	meta["annotations"] = annotations
	return map[string]any{"apiVersion": "kyverno.io/v2", "kind": s.kind, "metadata": meta,
		"spec": map[string]any{"owner": owner, "results": results, "summary": summary}}, nil
}

func main() {
	n := flag.Int("objects", 2000, "resources of each shape per batch (their objects hold one or more each)")
	only := flag.String("only", "", "measure only the shapes whose name matches this regular expression (the Events' name is \""+eventShape+"\")")
	flag.Parse()
	measured, withEvents := shapes, true
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "writecost: --only:", err)
			os.Exit(2)
		}
		measured = nil
		for _, s := range shapes {
			if re.MatchString(s.name) {
				measured = append(measured, s)
			}
		}
		withEvents = re.MatchString(eventShape)
	}
	if err := run(*n, measured, withEvents); err != nil {
		fmt.Fprintln(os.Stderr, "writecost:", err)
		os.Exit(1)
	}
}

const eventShape = "Event (PolicyViolation, protobuf)"

func run(n int, selected []shape, withEvents bool) error {
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
	apiCPU := func() float64 { return benchutil.ChildCPU()["kube-apiserver"] }
	// measure creates a namespace, then the objects of create in it, and
	// gives the API server's CPU (ms) and the live heap (KiB) they took, per
	// resource.
	measure := func(ns string, resources int, create func() error) (cpuMs, heapKiB float64, err error) {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return 0, 0, err
		}
		h0, err := benchutil.APIServerLiveHeap(ctx, kube)
		if err != nil {
			return 0, 0, err
		}
		cpu0 := apiCPU()
		if err := create(); err != nil {
			return 0, 0, err
		}
		cpu1 := apiCPU()
		h1, err := benchutil.APIServerLiveHeap(ctx, kube)
		if err != nil {
			return 0, 0, err
		}
		return (cpu1 - cpu0) * 1000 / float64(resources), (h1 - h0) / float64(resources) / 1024, nil
	}
	fmt.Printf("%d resources per batch, objects created one at a time; costs per resource\n", n)
	type batch struct {
		s     shape
		ns    string
		names []string
	}
	var batches []batch
	for round := range 2 {
		for si, s := range selected {
			b := batch{s: s, ns: fmt.Sprintf("writecost-%d-%d", round, si), names: make([]string, n/s.resources())}
			size := 0
			cpu, heap, err := measure(b.ns, len(b.names)*s.resources(), func() error {
				for i := range b.names {
					b.names[i] = fmt.Sprintf("2f0e5a3c-1111-2222-3333-%012d", i)
					obj, err := object(s, b.ns, b.names[i])
					if err != nil {
						return err
					}
					if i == 0 {
						data, _ := (&unstructured.Unstructured{Object: obj}).MarshalJSON()
						size = len(data)
					}
					if _, err := dyn.Resource(s.gvr).Namespace(b.ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: "writecost"}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			batches = append(batches, b)
			fmt.Printf("%-72s %6d B of JSON an object: API server CPU %5.2f ms per create, live heap +%4.1f KiB\n", s.name, size, cpu, heap)
		}
		if !withEvents {
			continue
		}
		ns := fmt.Sprintf("writecost-%d-events", round)
		cpu, heap, err := measure(ns, n, func() error {
			for i := range n {
				if _, err := pkube.CoreV1().Events(ns).Create(ctx, event(ns, i), metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("event: %w", err)
		}
		fmt.Printf("%-72s %6s                  : API server CPU %5.2f ms per create, live heap +%4.1f KiB\n", eventShape, "", cpu, heap)
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
