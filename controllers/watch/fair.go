package watch

import "k8s.io/client-go/util/workqueue"

// NewFairQueue makes a Queue whose keys are handed to the workers in turn
// by group (groupOf: a resource's namespace), not in the order they came:
// one namespace with many slow keys queued (a tenant's policy whose data
// reads time out) delays another namespace's next key by one key's work at
// most, not by all of them (issue 53). Within a group, keys keep their
// order. Retries and panics are as NewQueue's.
func NewFairQueue(name string, groupOf func(key string) string) *Queue {
	fair := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Queue: newRoundRobin(groupOf)})
	return &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(RateLimiter(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name,
				DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name, Queue: fair})}),
		panicDelay: workqueue.NewTypedItemExponentialFailureRateLimiter[string](PanicBase, PanicCap),
	}
}

// roundRobin is a workqueue.Queue that pops the groups' keys in turn: a
// ring of the groups that have keys, each a FIFO. The workqueue calls it
// under its own lock.
type roundRobin struct {
	groupOf func(string) string
	groups  map[string]*group
	// next is the group whose key Pop gives next (nil: none queued).
	next *group
	n    int
}

type group struct {
	name       string
	keys       []string
	prev, succ *group
}

var _ workqueue.Queue[string] = (*roundRobin)(nil)

func newRoundRobin(groupOf func(string) string) *roundRobin {
	return &roundRobin{groupOf: groupOf, groups: map[string]*group{}}
}

// Touch: a key added again keeps its place (the workqueue keeps one copy).
func (q *roundRobin) Touch(string) {}

func (q *roundRobin) Len() int { return q.n }

// Push queues a key at the end of its group; a group that had no key
// joins the ring just before next (it has its turn after the others).
func (q *roundRobin) Push(key string) {
	name := q.groupOf(key)
	g := q.groups[name]
	if g == nil {
		g = &group{name: name}
		q.groups[name] = g
		if q.next == nil {
			g.prev, g.succ = g, g
			q.next = g
		} else {
			g.prev, g.succ = q.next.prev, q.next
			q.next.prev.succ = g
			q.next.prev = g
		}
	}
	g.keys = append(g.keys, key)
	q.n++
}

// Pop gives the first key of the next group, and moves the turn on. The
// workqueue calls it only when Len > 0.
func (q *roundRobin) Pop() string {
	g := q.next
	key := g.keys[0]
	g.keys[0] = ""
	g.keys = g.keys[1:]
	q.n--
	if len(g.keys) > 0 {
		q.next = g.succ
		return key
	}
	delete(q.groups, g.name)
	if g.succ == g {
		q.next = nil
	} else {
		g.prev.succ, g.succ.prev = g.succ, g.prev
		q.next = g.succ
	}
	return key
}
