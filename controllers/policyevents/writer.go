package policyevents

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// Writer is an EventRecorder that creates each Event (events.k8s.io/v1)
// itself, with at most DefaultInflightEvents creations at once: a Queue in front of it
// paces and bounds what waits, so nothing else needs to.
//
// client-go's event broadcaster, which wrote them before, keeps a copy of
// every Event it wrote for six to twelve minutes, to count repeats of it
// into a series; it also starts a goroutine for each. tally records a
// result's Event once per change, so the series never had anything to
// count: a scanner that recorded 8,000 violations in a first scan held
// them all (about a quarter of its heap at 10,000 Pods, all of it on the
// replica that owned the failing namespaces). The Event written is the one
// the broadcaster's recorder makes: the same name (<regarding>.<hex
// nanoseconds>), namespace (the regarding object's, or default), time,
// reporting controller and instance (<controller>-<hostname>). As the
// broadcaster does, a creation the API server refused is not tried again;
// one that did not reach it is, a few times.
type Writer struct {
	ctx        context.Context
	log        logr.Logger
	client     typedeventsv1.EventsGetter
	scheme     *runtime.Scheme
	controller string
	instance   string
	backoff    wait.Backoff
	slots      chan struct{}
	wg         sync.WaitGroup
	clock      clock.PassiveClock // the Events' times
}

var _ events.EventRecorder = (*Writer)(nil)

// DefaultInflightEvents is how many Events a Writer creates at once.
const DefaultInflightEvents = 8

// NewWriter returns a Writer creating Events through client, reported by
// controller, until ctx ends.
func NewWriter(ctx context.Context, client typedeventsv1.EventsGetter, scheme *runtime.Scheme, controller string) *Writer {
	hostname, _ := os.Hostname()
	return &Writer{ctx: ctx, log: logr.FromContextOrDiscard(ctx), client: client, scheme: scheme, controller: controller, instance: controller + "-" + hostname,
		backoff: wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.25, Steps: 5},
		slots:   make(chan struct{}, DefaultInflightEvents), clock: clock.RealClock{}}
}

// WithClock sets the clock that times the Events (the process's).
func (w *Writer) WithClock(c clock.PassiveClock) *Writer {
	w.clock = c
	return w
}

// Eventf creates the Event, waiting while DefaultInflightEvents creations are running.
func (w *Writer) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ev, err := w.event(regarding, related, eventtype, reason, action, note, args...)
	if err != nil {
		w.log.Error(err, "an Event could not be made; not recorded", "reason", reason)
		return
	}
	select {
	case w.slots <- struct{}{}:
	case <-w.ctx.Done():
		return
	}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.slots; w.wg.Done() }()
		if err := w.create(ev); err != nil {
			w.log.Error(err, "an Event could not be written", "reason", ev.Reason, "regarding", ev.Regarding.Name)
		}
	}()
}

// Wait waits for the creations running.
func (w *Writer) Wait() { w.wg.Wait() }

// event makes the Event as the broadcaster's recorder does.
func (w *Writer) event(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) (*eventsv1.Event, error) {
	ref, err := reference.GetReference(w.scheme, regarding)
	if err != nil {
		return nil, err
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		relatedRef, _ = reference.GetReference(w.scheme, related) // as the recorder: without it if it has none
	}
	if !util.ValidateEventType(eventtype) {
		return nil, fmt.Errorf("unsupported Event type %q", eventtype)
	}
	now := w.clock.Now()
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: namespace},
		EventTime:           metav1.MicroTime{Time: now},
		ReportingController: w.controller,
		ReportingInstance:   w.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             relatedRef,
		Note:                fmt.Sprintf(note, args...),
		Type:                eventtype,
	}, nil
}

// create writes ev, again after a while if the API server was not reached
// (a transport error, no answer): what the broadcaster tries again. While
// stopping, what is not written is lost with the process, as the
// broadcaster's would be.
func (w *Writer) create(ev *eventsv1.Event) error {
	unreached := func(err error) bool {
		var answered apierrors.APIStatus
		return w.ctx.Err() == nil && !errors.As(err, &answered)
	}
	return retry.OnError(w.backoff, unreached, func() error {
		_, err := w.client.Events(ev.Namespace).Create(w.ctx, ev, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}
