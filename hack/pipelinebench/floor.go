package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/internal/pss"
	"github.com/tally-dev/tally/report"
)

// floorWriter is --floor: for each Pod created it writes exactly what any
// implementation of these reports must write, the PolicyReport (Kyverno's
// fields, created once) and the violation Events (through the same
// events library and shapes as tally's), and nothing else: no intermediate
// object, no watch of its own reports. What the API server pays for it is
// the floor tally is measured against.
type floorWriter struct {
	dyn      dynamic.Interface
	policies []floorPolicy
	emitter  *policyevents.Emitter
	stop     func()
	written  atomic.Int64
	failed   atomic.Int64
}

type floorPolicy struct {
	compiled *engine.Policy
	ref      *corev1.ObjectReference
}

// startFloor compiles the Pod Security policies of dir (as installed) and
// writes the reports of every Pod the API server holds or gets.
func startFloor(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, dir string) (*floorWriter, error) {
	docs, err := pss.Read(dir)
	if err != nil {
		return nil, err
	}
	f := &floorWriter{dyn: dyn}
	for _, obj := range docs {
		var p kyvernov1.ClusterPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
			return nil, err
		}
		c, err := engine.CompileClusterPolicy(&p)
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", p.Name, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		f.policies = append(f.policies, floorPolicy{compiled: c,
			ref: &corev1.ObjectReference{APIVersion: "kyverno.io/v1", Kind: "ClusterPolicy", Name: u.GetName()}})
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	ctx, cancel := context.WithCancel(ctx)
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		return nil, err
	}
	f.emitter = &policyevents.Emitter{Recorder: broadcaster.NewRecorder(scheme.Scheme, policyevents.ControllerScan)}
	factory := informers.NewSharedInformerFactory(kube, 0)
	pods := factory.Core().V1().Pods().Informer()
	work := make(chan *corev1.Pod, 1024)
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			work <- p
		}
	}}); err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if err := f.write(ctx, p); err != nil {
					f.failed.Add(1)
				}
			}
		}()
	}
	factory.Start(ctx.Done())
	f.stop = func() {
		cancel()
		factory.Shutdown()
		close(work)
		wg.Wait()
		broadcaster.Shutdown()
	}
	return f, nil
}

// write writes one Pod's PolicyReport and its violation Events.
func (f *floorWriter) write(ctx context.Context, pod *corev1.Pod) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return err
	}
	obj["apiVersion"], obj["kind"] = "v1", "Pod"
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	req := &engine.Request{Object: obj, Background: true}
	now := time.Now()
	var results []wgv1alpha2.PolicyReportResult
	for _, p := range f.policies {
		for _, r := range p.compiled.Evaluate(ctx, req) {
			e := report.Result(p.compiled, r, report.ProcessBackground, now)
			results = append(results, e)
			if status, violation := policyevents.StatusOf(e.Result); violation {
				f.emitter.Violation(ref, policyevents.Result{Policy: p.ref, PolicyName: p.compiled.Name, Rule: e.Rule, Status: status, Message: e.Message}, false)
			}
		}
	}
	if len(results) == 0 {
		return nil
	}
	polr, _ := report.Final(report.Subject{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, results)
	body, err := runtime.DefaultUnstructuredConverter.ToUnstructured(polr)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: body}
	u.SetLabels(map[string]string{report.LabelManagedBy: report.ManagedBy})
	if _, err := f.dyn.Resource(gvrPolicyReports).Namespace(pod.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return err
	}
	f.written.Add(1)
	return nil
}
