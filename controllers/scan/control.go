package scan

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// in the order they came, through applyControl, which returns an error to
// retry (a store write that failed is tried again with the queue's backoff,
// not logged and dropped). A complete list's Replace and Listed are queued
// behind the events of the list, so that "listed" means "applied": no
// resource is evaluated, and no report swept, before the policies of the
// list are in place.
//
// Resources and namespaces are not control events: their handlers update
// the store (the scanner's cache of the cluster, as an informer's indexer)
// and queue the resource's UID for the evaluation workers.

// isControlKind reports whether gvr's events are control events.
func isControlKind(gvr schema.GroupVersionResource) bool {
	switch gvr {
	case apiresources.ClusterPolicy, apiresources.Policy, apiresources.ValidatingPolicy, apiresources.NamespacedValidatingPolicy,
		apiresources.PolicyException, apiresources.CELPolicyException,
		apiresources.ValidatingAdmissionPolicy, apiresources.ValidatingAdmissionPolicyBinding:
		return true
	}
	return false
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

// pendingControl holds what the control queue's keys stand for until the
// worker has applied it.
type pendingControl struct {
	mu     sync.Mutex
	events map[string]*controlEvent
	// lists are the complete lists waiting to be applied, by kind: the
	// names they hold, and those of the objects upserted since (a newer
	// event than the list).
	lists map[schema.GroupVersionResource][]*unstructured.Unstructured
	// kinds counts the events waiting, by kind.
	kinds map[schema.GroupVersionResource]int
}

func newPendingControl() *pendingControl {
	return &pendingControl{events: map[string]*controlEvent{}, lists: map[schema.GroupVersionResource][]*unstructured.Unstructured{},
		kinds: map[schema.GroupVersionResource]int{}}
}

// put records an object's newest event.
func (p *pendingControl) put(key string, ev *controlEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.events[key]; !ok {
		p.kinds[ev.gvr]++
	}
	p.events[key] = ev
	if list, ok := p.lists[ev.gvr]; ok && !ev.removed {
		p.lists[ev.gvr] = append(list, ev.obj)
	}
}

func (p *pendingControl) get(key string) *controlEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.events[key]
}

// done forgets an applied event, unless a newer one replaced it meanwhile
// (its key is queued again: the queue marks a key added while it is
// processed).
func (p *pendingControl) done(key string, ev *controlEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.events[key] == ev {
		delete(p.events, key)
		if p.kinds[ev.gvr]--; p.kinds[ev.gvr] == 0 {
			delete(p.kinds, ev.gvr)
		}
	}
}

// waiting reports whether events of a kind, or its list, wait to be
// applied.
func (p *pendingControl) waiting(gvr schema.GroupVersionResource, orList bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, list := p.lists[gvr]
	return p.kinds[gvr] > 0 || (orList && list)
}

// Control-queue handlers (watch.Sink, for the control kinds).

func (s *Scanner) queueEvent(gvr schema.GroupVersionResource, u *unstructured.Unstructured, removed bool) {
	key := eventKey(gvr, u.GetNamespace(), u.GetName())
	s.pending.put(key, &controlEvent{gvr: gvr, obj: u, removed: removed})
	s.control.Add(key)
}

func (s *Scanner) queueReplace(gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	s.pending.mu.Lock()
	s.pending.lists[gvr] = objs
	s.pending.mu.Unlock()
	s.control.Add(keyReplace + gvr.String())
}

// applyControl applies what a control key stands for; an error retries
// the key. A list waits for the events ahead of it, and the end of a
// first list for them and the list.
func (s *Scanner) applyControl(ctx context.Context, key string) error {
	switch {
	case strings.HasPrefix(key, keyEvent):
		ev := s.pending.get(key)
		if ev == nil {
			return nil // applied already
		}
		if err := s.applyEvent(ctx, ev); err != nil {
			return err
		}
		s.pending.done(key, ev)
		return nil
	case strings.HasPrefix(key, keyReplace):
		gvr := s.controlKind(strings.TrimPrefix(key, keyReplace))
		if s.pending.waiting(gvr, false) {
			s.control.AddAfter(key, 10*time.Millisecond)
			return nil
		}
		s.pending.mu.Lock()
		objs := s.pending.lists[gvr]
		s.pending.mu.Unlock()
		if err := s.dropMissing(ctx, gvr, objs); err != nil {
			return err
		}
		s.pending.mu.Lock()
		delete(s.pending.lists, gvr)
		s.pending.mu.Unlock()
		return nil
	case strings.HasPrefix(key, keyListed):
		gvr := s.controlKind(strings.TrimPrefix(key, keyListed))
		if s.pending.waiting(gvr, true) {
			s.control.AddAfter(key, 10*time.Millisecond)
			return nil
		}
		s.listed(gvr)
		return nil
	}
	return fmt.Errorf("unknown control key %q", key)
}

// controlKind is the control kind a key names.
func (s *Scanner) controlKind(name string) schema.GroupVersionResource {
	for _, gvr := range []schema.GroupVersionResource{apiresources.ClusterPolicy, apiresources.Policy, apiresources.ValidatingPolicy,
		apiresources.NamespacedValidatingPolicy, apiresources.PolicyException, apiresources.CELPolicyException,
		apiresources.ValidatingAdmissionPolicy, apiresources.ValidatingAdmissionPolicyBinding} {
		if gvr.String() == name {
			return gvr
		}
	}
	return schema.GroupVersionResource{}
}

// applyEvent applies one object's newest event.
func (s *Scanner) applyEvent(ctx context.Context, ev *controlEvent) error {
	u := ev.obj
	if !ev.removed {
		switch ev.gvr {
		case apiresources.PolicyException, apiresources.CELPolicyException:
			return s.exceptions.upsert(ctx, ev.gvr, u)
		case apiresources.ValidatingAdmissionPolicy:
			return s.vaps.upsert(ctx, u)
		case apiresources.ValidatingAdmissionPolicyBinding:
			return s.vaps.upsertBinding(ctx, u.GetName(), u)
		}
		return s.upsertPolicy(ctx, ev.gvr, u)
	}
	switch ev.gvr {
	case apiresources.PolicyException, apiresources.CELPolicyException:
		return s.exceptions.remove(exceptionKey(ev.gvr, u.GetNamespace(), u.GetName()))
	case apiresources.ValidatingAdmissionPolicy:
		return s.vaps.remove(ctx, u.GetName())
	case apiresources.ValidatingAdmissionPolicyBinding:
		return s.vaps.upsertBinding(ctx, u.GetName(), nil)
	}
	s.opts.Catalog.Forget(ev.gvr, u.GetNamespace(), u.GetName())
	name := apiresources.PolicyKey(ev.gvr, u.GetNamespace(), u.GetName())
	if err := s.removePolicy(ctx, name); err != nil {
		return err
	}
	// A deleted policy keeps no series (its results' go with them).
	s.metrics.policyErrors.DeletePartialMatch(prometheus.Labels{labelPolicy: name})
	return nil
}

// dropMissing applies a complete list of a control kind: what is not in
// it is forgotten.
func (s *Scanner) dropMissing(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) error {
	if gvr == apiresources.ValidatingAdmissionPolicyBinding {
		return s.vaps.applyBindingList(ctx, objs)
	}
	if gvr == apiresources.PolicyException || gvr == apiresources.CELPolicyException {
		return s.exceptions.dropMissing(gvr, objs)
	}
	if catalog.IsPolicyKind(gvr) {
		s.opts.Catalog.Retain(gvr, objs)
	}
	return s.dropMissingPolicies(ctx, gvr, objs)
}

// runControl applies control events until ctx ends (one worker: events
// apply in the order they came).
func (s *Scanner) runControl(ctx context.Context) {
	for s.control.ProcessNext(ctx, "applying a policy change", s.applyControl) {
	}
}

// newControlQueue is the control events' queue.
func newControlQueue() *watch.Queue { return watch.NewQueue("tally-scan-control") }
