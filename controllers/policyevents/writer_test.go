package policyevents

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	k8stesting "k8s.io/client-go/testing"
)

func testWriter(t *testing.T, client *fake.Clientset) *Writer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := NewWriter(ctx, client.EventsV1(), runtime.NewScheme(), ControllerScan)
	w.backoff.Duration = time.Millisecond
	return w
}

// The Event written is the one client-go's recorder makes: named after the
// regarding object, in its namespace (default for a cluster-scoped one),
// reported by the controller and its instance, the note formatted.
func TestTheWriterWritesTheRecordersEvent(t *testing.T) {
	client := fake.NewSimpleClientset()
	w := testWriter(t, client)
	pod := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p", UID: "u"}
	policy := &corev1.ObjectReference{APIVersion: "kyverno.io/v1", Kind: "ClusterPolicy", Name: "pol"}
	w.Eventf(policy, pod, corev1.EventTypeWarning, ReasonViolation, ActionPassed, "%s fail", "ns/p")
	w.Eventf(pod, nil, corev1.EventTypeWarning, ReasonViolation, ActionPassed, "on the pod")
	w.Eventf(pod, nil, "Bogus", ReasonViolation, ActionPassed, "never written")
	w.Wait()
	for _, c := range []struct{ ns, prefix, note string }{{"default", "pol.", "ns/p fail"}, {"ns", "p.", "on the pod"}} {
		list, err := client.EventsV1().Events(c.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("%s: %d Events, want 1", c.ns, len(list.Items))
		}
		ev := list.Items[0]
		if !strings.HasPrefix(ev.Name, c.prefix) || ev.Note != c.note || ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonViolation ||
			ev.Action != ActionPassed || ev.ReportingController != ControllerScan || !strings.HasPrefix(ev.ReportingInstance, ControllerScan+"-") || ev.EventTime.IsZero() {
			t.Errorf("%s: Event %+v", c.ns, ev)
		}
	}
	list, _ := client.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if rel := list.Items[0].Related; rel == nil || rel.Name != "p" || list.Items[0].Regarding.Name != "pol" {
		t.Errorf("regarding %+v, related %+v; want the policy, the pod", list.Items[0].Regarding, rel)
	}
}

// A creation that did not reach the API server is tried again; one it
// refused is not.
func TestTheWriterRetriesOnlyWhatDidNotArrive(t *testing.T) {
	client := fake.NewSimpleClientset()
	var calls atomic.Int64
	client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := calls.Add(1)
		ev := a.(k8stesting.CreateAction).GetObject().(*eventsv1.Event)
		switch ev.Note {
		case "unreached":
			if n < 3 {
				return true, nil, errors.New("connection refused")
			}
			return false, nil, nil
		case "refused":
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, ev.Name, errors.New("no"))
		}
		return false, nil, nil
	})
	w := testWriter(t, client)
	pod := &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"}
	w.Eventf(pod, nil, corev1.EventTypeWarning, ReasonViolation, ActionPassed, "unreached")
	w.Wait()
	if got := calls.Load(); got != 3 {
		t.Errorf("an unreached creation was made %d times, want 3 (two failures, then written)", got)
	}
	calls.Store(0)
	w.Eventf(pod, nil, corev1.EventTypeWarning, ReasonViolation, ActionPassed, "refused")
	w.Wait()
	if got := calls.Load(); got != 1 {
		t.Errorf("a refused creation was made %d times, want 1", got)
	}
}

// heldEvents is an Events client whose creations wait for release.
type heldEvents struct {
	typedeventsv1.EventInterface
	release       chan struct{}
	running, most atomic.Int64
	written       atomic.Int64
}

func (h *heldEvents) Events(string) typedeventsv1.EventInterface { return h }

func (h *heldEvents) Create(context.Context, *eventsv1.Event, metav1.CreateOptions) (*eventsv1.Event, error) {
	r := h.running.Add(1)
	for m := h.most.Load(); r > m && !h.most.CompareAndSwap(m, r); m = h.most.Load() {
	}
	<-h.release
	h.running.Add(-1)
	h.written.Add(1)
	return nil, nil
}

// At most DefaultInflightEvents creations run at once; Eventf waits for a
// free one.
func TestTheWriterBoundsItsCreations(t *testing.T) {
	h := &heldEvents{release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := NewWriter(ctx, h, runtime.NewScheme(), ControllerScan)
	pod := &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"}
	done := make(chan struct{})
	go func() {
		for range 3 * DefaultInflightEvents {
			w.Eventf(pod, nil, corev1.EventTypeWarning, ReasonViolation, ActionPassed, "held")
		}
		close(done)
	}()
	_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return h.running.Load() >= DefaultInflightEvents, nil
	}) // judged below
	select {
	case <-done:
		t.Fatal("Eventf returned for every Event while the creations were held")
	case <-time.After(50 * time.Millisecond):
	}
	close(h.release)
	<-done
	w.Wait()
	if m := h.most.Load(); m != DefaultInflightEvents {
		t.Errorf("at most %d creations at once, want %d", m, DefaultInflightEvents)
	}
	if n := h.written.Load(); n != 3*DefaultInflightEvents {
		t.Errorf("%d Events written, want %d", n, 3*DefaultInflightEvents)
	}
}
