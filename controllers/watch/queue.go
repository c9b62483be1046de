package watch

import (
	"context"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
)

// Queue is the rate-limited queue of keys (resource UIDs) a controller's
// workers reconcile, counting the keys being worked on: an empty queue alone
// does not say that the work is done.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	inflight atomic.Int64
}

// NewQueue makes a queue with client-go's default controller rate limiter.
func NewQueue(name string) *Queue {
	return &Queue{TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})}
}

// ProcessNext takes a key and reconciles it; a failure is logged with what
// and the key is retried with backoff. It returns false once the queue is
// shut down.
func (q *Queue) ProcessNext(ctx context.Context, what string, reconcile func(context.Context, string) error) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	q.inflight.Add(1)
	defer q.inflight.Add(-1)
	defer q.Done(key)
	if err := reconcile(ctx, key); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, what+" failed; retrying", "uid", key)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// Idle reports whether nothing is queued or being worked on.
func (q *Queue) Idle() bool { return q.Len() == 0 && q.inflight.Load() == 0 }
