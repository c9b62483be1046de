package policyevents

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Queue holds the Events recorded through its recorders (Recorder) and
// hands each to the recorder behind it, at most QPS a second in all.
//
// client-go's event broadcaster starts a goroutine for every Event, which
// then waits for the client's rate limit with its own copy of the Event: a
// first scan of 10,000 Pods under the Pod Security policies (16,000
// violation Events, twice that through the webhook) left about 9,000 of
// them waiting, several hundred MiB of the scanner's memory. Held here,
// an Event waiting takes its note and two object references; fed at a
// pace below the client's limit, the broadcaster's goroutines finish as
// fast as they start. Past Max waiting Events, new ones are dropped and
// counted (tally_events_dropped_total), as Kyverno's --maxQueuedEvents
// drops them.
type Queue struct {
	limiter *rate.Limiter
	dropped prometheus.Counter

	mu      sync.Mutex
	waiting []queued
	max     int
	wake    chan struct{}
}

type queued struct {
	next                      events.EventRecorder
	regarding, related        runtime.Object
	eventtype, reason, action string
	note                      string
}

// queueRecorder is a Queue's EventRecorder in front of next.
type queueRecorder struct {
	q    *Queue
	next events.EventRecorder
}

var _ events.EventRecorder = queueRecorder{}

// Recorder returns an EventRecorder whose Events wait in q, then go to next.
func (q *Queue) Recorder(next events.EventRecorder) events.EventRecorder {
	return queueRecorder{q: q, next: next}
}

// DefaultMaxQueuedEvents and DefaultEventsQPS are the defaults of
// tally-scanner's --max-queued-events and --events-qps.
const (
	DefaultMaxQueuedEvents = 50000
	DefaultEventsQPS       = 80
)

// NewQueue returns an empty Queue; Run sends. maxQueued <= 0 and qps <= 0
// take the defaults.
func NewQueue(maxQueued int, qps float64, reg prometheus.Registerer) *Queue {
	if maxQueued <= 0 {
		maxQueued = DefaultMaxQueuedEvents
	}
	if qps <= 0 {
		qps = DefaultEventsQPS
	}
	q := &Queue{limiter: rate.NewLimiter(rate.Limit(qps), max(1, int(qps))), max: maxQueued, wake: make(chan struct{}, 1),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_events_dropped_total", Help: "Result Events not recorded because --max-queued-events were waiting to be sent already.",
		})}
	if reg != nil {
		reg.MustRegister(q.dropped, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tally_events_queued", Help: "Result Events waiting to be sent (at most --events-qps a second).",
		}, func() float64 { return float64(q.Len()) }))
	}
	return q
}

// Eventf queues one Event; the note is formatted now.
func (r queueRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.q.add(queued{next: r.next, regarding: regarding, related: related, eventtype: eventtype, reason: reason, action: action, note: fmt.Sprintf(note, args...)})
}

func (q *Queue) add(e queued) {
	q.mu.Lock()
	if len(q.waiting) >= q.max {
		q.mu.Unlock()
		q.dropped.Inc()
		return
	}
	q.waiting = append(q.waiting, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Len is the number of Events waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// Run sends the queued Events until ctx ends; those still waiting then are
// lost with the process, as the broadcaster's own would be.
func (q *Queue) Run(ctx context.Context) {
	for {
		q.mu.Lock()
		var e queued
		ok := len(q.waiting) > 0
		if ok {
			e = q.waiting[0]
			q.waiting[0] = queued{}
			q.waiting = q.waiting[1:]
			if len(q.waiting) == 0 {
				q.waiting = nil // let the backing array go
			}
		}
		q.mu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
			}
			continue
		}
		if err := q.limiter.Wait(ctx); err != nil {
			return // ctx ended
		}
		e.next.Eventf(e.regarding, e.related, e.eventtype, e.reason, e.action, "%s", e.note)
	}
}
