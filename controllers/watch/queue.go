package watch

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

// Retry bounds. A failed reconcile is retried after RetryBase, doubling up
// to RetryCap, with an overall bucket of 10 retries/s (burst 100) as
// client-go's default controller limiter (whose cap is 1,000 s). A key
// whose reconcile panicked waits PanicBase, doubling up to PanicCap: a
// resource that crashes a worker must not be retried hot.
const (
	RetryBase = 5 * time.Millisecond
	RetryCap  = 5 * time.Minute
	PanicBase = 30 * time.Second
	PanicCap  = 30 * time.Minute
)

// Queue is the rate-limited queue of keys (resource UIDs) a controller's
// workers reconcile, counting the keys being worked on: an empty queue alone
// does not say that the work is done. It is the one runner of the
// controllers' reconciles: retries with capped backoff and panic recovery
// live here.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	inflight atomic.Int64
	panics   atomic.Int64
	delayed  atomic.Int64
	// panicDelay spaces the retries of keys whose reconcile panicked.
	panicDelay workqueue.TypedRateLimiter[string]
}

// NewQueue makes a queue with capped exponential backoff (RetryBase to
// RetryCap per key, 10 retries/s overall).
func NewQueue(name string) *Queue {
	return &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(
			RateLimiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		panicDelay: workqueue.NewTypedItemExponentialFailureRateLimiter[string](PanicBase, PanicCap),
	}
}

// RateLimiter is the retry limiter of a Queue.
func RateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](RetryBase, RetryCap),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// ProcessNext takes a key and reconciles it; a failure is logged with what
// and the key is retried with backoff. A panic in reconcile is recovered:
// it is logged with its stack (never its value, which may hold an object's
// content), counted (Panics), and the key is retried after PanicBase at the
// earliest, so that the process keeps serving every other key. It returns
// false once the queue is shut down.
func (q *Queue) ProcessNext(ctx context.Context, what string, reconcile func(context.Context, string) error) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	q.inflight.Add(1)
	defer q.inflight.Add(-1)
	defer q.Done(key)
	err, panicked := q.run(ctx, key, reconcile)
	switch {
	case panicked:
		q.Forget(key)
		q.afterPanic(ctx, what, key, err)
	case err != nil:
		logr.FromContextOrDiscard(ctx).Error(err, what+" failed; retrying", "uid", key)
		q.AddRateLimited(key)
	default:
		q.Forget(key)
		q.panicDelay.Forget(key)
	}
	return true
}

// Guard runs reconcile for key outside the queue's workers (a periodic
// scan's own workers) with the same panic recovery as ProcessNext: a panic
// is logged, counted, and the key queued again after the panic delay;
// panicked then says so. Other errors are the caller's.
func (q *Queue) Guard(ctx context.Context, what, key string, reconcile func(context.Context, string) error) (err error, panicked bool) {
	if err, panicked = q.run(ctx, key, reconcile); panicked {
		q.afterPanic(ctx, what, key, err)
	}
	return err, panicked
}

// Protect runs one pass of a controller's other loops (a scheduler tick,
// an orphan check) with panic recovery: a panic is logged with its stack,
// counted in Panics, and the loop goes on with its next pass.
func (q *Queue) Protect(ctx context.Context, what string, fn func()) (panicked bool) {
	err, panicked := q.run(ctx, "", func(context.Context, string) error { fn(); return nil })
	if panicked {
		q.panics.Add(1)
		logr.FromContextOrDiscard(ctx).Error(err, what+" panicked; the loop goes on")
	}
	return panicked
}

// afterPanic counts and logs a panic of key's reconcile and queues the key
// again after the panic delay.
func (q *Queue) afterPanic(ctx context.Context, what, key string, err error) {
	q.panics.Add(1)
	delay := q.panicDelay.When(key)
	logr.FromContextOrDiscard(ctx).Error(err, what+" panicked; retried later", "uid", key, "after", delay)
	q.AddAfter(key, delay)
}

// run calls reconcile, turning a panic into an error that carries the
// panic's type and the stack.
func (q *Queue) run(ctx context.Context, key string, reconcile func(context.Context, string) error) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			err, panicked = fmt.Errorf("panic (%T) at\n%s", p, debug.Stack()), true
		}
	}()
	return reconcile(ctx, key), false
}

// Panics counts the reconciles that panicked.
func (q *Queue) Panics() int64 { return q.panics.Load() }

// AddAfter queues key after d (counted: Delayed).
func (q *Queue) AddAfter(key string, d time.Duration) {
	q.delayed.Add(1)
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

// AddRateLimited queues key after its backoff (counted: Delayed).
func (q *Queue) AddRateLimited(key string) {
	q.delayed.Add(1)
	q.TypedRateLimitingInterface.AddRateLimited(key)
}

// Delayed counts the keys queued for later (AddAfter, AddRateLimited): a
// test that nothing comes back later reads it instead of sleeping.
func (q *Queue) Delayed() int64 { return q.delayed.Load() }

// Idle reports whether nothing is queued or being worked on.
func (q *Queue) Idle() bool { return q.Len() == 0 && q.inflight.Load() == 0 }
