package scan

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/watch"
)

// The control events are the changes of what the scan evaluates with:
// policies of every kind, PolicyExceptions, ValidatingAdmissionPolicies and
// their bindings. Their watch handlers only record the newest event of each
// object and queue its key; one worker applies them from the control queue,
// in the order they came, through the scanner's applyEvent, which returns
// an error to retry (a store write that failed is tried again with the
// queue's backoff, not logged and dropped). A complete list's Replace and Listed are queued
// behind the events of the list, so that "listed" means "applied": no
// resource is evaluated, and no report swept, before the policies of the
// list are in place.
//
// Resources and namespaces are not control events: their handlers update
// the store (the scanner's cache of the cluster, as an informer's indexer)
// and queue the resource's UID for the evaluation workers.

// isControlKind reports whether gvr's events are control events: every
// policy kind the catalog compiles (a new one is a descriptor in the
// catalog's table, and its events are control events with no change
// here), the exceptions, and the admission policies with their bindings.
func isControlKind(gvr schema.GroupVersionResource) bool {
	if gvr == apiresources.PolicyException || gvr == apiresources.CELPolicyException {
		return true
	}
	for _, k := range catalog.Kinds(catalog.AdmissionPolicy) {
		if gvr == k.GVR || gvr == k.Binding {
			return true
		}
	}
	return catalog.IsPolicyKind(gvr)
}

// controlEvent is the newest change of one object.
type controlEvent struct {
	gvr     schema.GroupVersionResource
	obj     *unstructured.Unstructured
	removed bool
}

// Control queue keys: an object's events, a kind's complete list (Replace)
// and the end of its first list (Listed).
const (
	keyEvent   = "event:"
	keyReplace = "replace:"
	keyListed  = "listed:"
)

func eventKey(gvr schema.GroupVersionResource, namespace, name string) string {
	return keyEvent + gvr.String() + "|" + namespace + "/" + name
}

// pendingList is a complete list waiting to be applied.
type pendingList struct{ objs []*unstructured.Unstructured }

// controlApplier applies what the control queue hands it (the policy
// reconciler): an object's newest event, a kind's complete list (what is
// not in it is forgotten), and the end of a kind's first list. An error
// retries the event or list with the queue's backoff.
type controlApplier interface {
	applyEvent(ctx context.Context, ev *controlEvent) error
	applyList(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) error
	listed(gvr schema.GroupVersionResource)
}

// controlQueue orders the control events and hands them, one at a time,
// to the controlApplier its worker runs with: the newest event of each
// object, a kind's complete list once the events ahead of it are applied,
// and the end of a kind's first list once the list is.
type controlQueue struct {
	queue *watch.Queue

	mu sync.Mutex
	// events are the newest event of each object, by key, until applied.
	events map[string]*controlEvent
	// lists are the complete lists waiting to be applied, by kind: the
	// names they hold, and those of the objects upserted since (a newer
	// event than the list).
	lists map[schema.GroupVersionResource]*pendingList
	// waitingEvents counts the events waiting, by kind.
	waitingEvents map[schema.GroupVersionResource]int
	// kinds are the kinds named by the keys of lists and list ends.
	kinds map[string]schema.GroupVersionResource
}

func newControlQueue() *controlQueue {
	return &controlQueue{queue: watch.NewQueue("tally-scan-control"),
		events: map[string]*controlEvent{}, lists: map[schema.GroupVersionResource]*pendingList{},
		waitingEvents: map[schema.GroupVersionResource]int{}, kinds: map[string]schema.GroupVersionResource{}}
}

// event queues an object's change (removed: its deletion), replacing the
// one of the same object still waiting.
func (c *controlQueue) event(gvr schema.GroupVersionResource, u *unstructured.Unstructured, removed bool) {
	key := eventKey(gvr, u.GetNamespace(), u.GetName())
	ev := &controlEvent{gvr: gvr, obj: u, removed: removed}
	c.mu.Lock()
	if _, ok := c.events[key]; !ok {
		c.waitingEvents[gvr]++
	}
	c.events[key] = ev
	if list := c.lists[gvr]; list != nil && !removed {
		list.objs = append(list.objs, u)
	}
	c.mu.Unlock()
	c.queue.Add(key)
}

// list queues a kind's complete list.
func (c *controlQueue) list(gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	c.mu.Lock()
	c.lists[gvr] = &pendingList{objs: objs}
	c.kinds[gvr.String()] = gvr
	c.mu.Unlock()
	c.queue.Add(keyReplace + gvr.String())
}

// endOfList queues the end of a kind's first list.
func (c *controlQueue) endOfList(gvr schema.GroupVersionResource) {
	c.mu.Lock()
	c.kinds[gvr.String()] = gvr
	c.mu.Unlock()
	c.queue.Add(keyListed + gvr.String())
}

// waiting reports whether events of a kind, or its list, wait to be
// applied.
func (c *controlQueue) waiting(gvr schema.GroupVersionResource, orList bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, list := c.lists[gvr]
	return c.waitingEvents[gvr] > 0 || (orList && list)
}

// apply applies what a key stands for; an error retries the key. A list
// waits for the events ahead of it, the end of a first list for them and
// the list: each is queued again 10 ms later.
func (c *controlQueue) apply(ctx context.Context, a controlApplier, key string) error {
	switch {
	case strings.HasPrefix(key, keyEvent):
		c.mu.Lock()
		ev := c.events[key]
		c.mu.Unlock()
		if ev == nil {
			return nil // applied already
		}
		if err := a.applyEvent(ctx, ev); err != nil {
			return err
		}
		c.mu.Lock()
		if c.events[key] == ev { // else a newer event came meanwhile: its key is queued again
			delete(c.events, key)
			if c.waitingEvents[ev.gvr]--; c.waitingEvents[ev.gvr] == 0 {
				delete(c.waitingEvents, ev.gvr)
			}
		}
		c.mu.Unlock()
		return nil
	case strings.HasPrefix(key, keyReplace):
		gvr, later := c.behind(key, keyReplace, false)
		if later {
			return nil
		}
		c.mu.Lock()
		list := c.lists[gvr]
		c.mu.Unlock()
		if list == nil {
			return nil // applied already (its key came again): an absent list is not an empty one
		}
		if err := a.applyList(ctx, gvr, list.objs); err != nil {
			return err
		}
		c.mu.Lock()
		if c.lists[gvr] == list { // else a newer list came meanwhile: its key is queued again
			delete(c.lists, gvr)
		}
		c.mu.Unlock()
		return nil
	case strings.HasPrefix(key, keyListed):
		gvr, later := c.behind(key, keyListed, true)
		if !later {
			a.listed(gvr)
		}
		return nil
	}
	return fmt.Errorf("unknown control key %q", key)
}

// behind returns the kind a list's (or list end's) key names, and whether
// what it must wait for is still waiting: the key is then queued again 10 ms
// later.
func (c *controlQueue) behind(key, prefix string, orList bool) (gvr schema.GroupVersionResource, later bool) {
	c.mu.Lock()
	gvr = c.kinds[strings.TrimPrefix(key, prefix)]
	c.mu.Unlock()
	if c.waiting(gvr, orList) {
		c.queue.AddAfter(key, 10*time.Millisecond)
		return gvr, true
	}
	return gvr, false
}

// processNext applies the next key through a; false once the queue is
// shut down.
func (c *controlQueue) processNext(ctx context.Context, a controlApplier) bool {
	return c.queue.ProcessNext(ctx, "applying a policy change", func(ctx context.Context, key string) error { return c.apply(ctx, a, key) })
}

// run applies control events through a until the queue is shut down (one
// worker: events apply in the order they came).
func (c *controlQueue) run(ctx context.Context, a controlApplier) {
	for c.processNext(ctx, a) {
	}
}
