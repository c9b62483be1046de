package admission

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/utils/clock"
)

// Admission results the background scan recomputes are not written.
//
// A result of a policy with background on is computed again by the scan
// of the resource, which the scanner makes as soon as it sees the resource
// created or changed, and the merge prefers the newer of the two (R20): an
// AdmissionReport holding it would cross the API server twice (written,
// then deleted once merged) for a result the final report gets anyway.
// What only admission can tell still goes through an AdmissionReport: the
// results of policies with background off (R10), and every result of a
// kind the scanner cannot read (R28), which no scan recomputes.

// Coverage tells whether the background scan reads a kind: whether this
// process's ServiceAccount (the scanner's: one Pod, one ServiceAccount) may
// list and watch it, asked with a SelfSubjectAccessReview and remembered
// for TTL. When it cannot tell (the review failed), it says no: the results
// are written.
type Coverage struct {
	client authorizationclient.SelfSubjectAccessReviewInterface
	ttl    time.Duration
	clock  clock.PassiveClock

	mu    sync.Mutex
	known map[schema.GroupResource]coverageEntry
}

type coverageEntry struct {
	scanned bool
	at      time.Time
}

// DefaultCoverageTTL is how long an answer of Coverage is kept.
const DefaultCoverageTTL = 5 * time.Minute

// NewCoverage asks client; ttl <= 0 is DefaultCoverageTTL.
func NewCoverage(client authorizationclient.SelfSubjectAccessReviewInterface, ttl time.Duration) *Coverage {
	if ttl <= 0 {
		ttl = DefaultCoverageTTL
	}
	return &Coverage{client: client, ttl: ttl, clock: clock.RealClock{}, known: map[schema.GroupResource]coverageEntry{}}
}

// Scanned says whether the background scan reads resources of gvr.
func (c *Coverage) Scanned(ctx context.Context, gvr schema.GroupVersionResource) bool {
	gr := gvr.GroupResource()
	now := c.clock.Now()
	c.mu.Lock()
	e, ok := c.known[gr]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl {
		return e.scanned
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	scanned := true
	for _, verb := range []string{"list", "watch"} {
		review, err := c.client.Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: gvr.Group, Resource: gvr.Resource},
		}}, metav1.CreateOptions{})
		if err != nil {
			// Not remembered: asked again at the next request.
			logr.FromContextOrDiscard(ctx).V(1).Info("cannot tell whether the scan reads a kind; its admission results are written", "resource", gr.String(), "error", err.Error())
			return false
		}
		scanned = scanned && review.Status.Allowed
	}
	c.mu.Lock()
	c.remember(gr, coverageEntry{scanned: scanned, at: now})
	c.mu.Unlock()
	return scanned
}

// maxCoverageEntries bounds what Coverage remembers: a review may name any
// resource (a forged one, made-up kinds), and the answers must not grow
// with them (issue 39).
const maxCoverageEntries = 1024

// remember keeps an answer: past the bound, expired answers are dropped
// first, and with none to drop the answer is not kept (asked again next
// time). Callers hold c.mu.
func (c *Coverage) remember(gr schema.GroupResource, e coverageEntry) {
	if _, ok := c.known[gr]; !ok && len(c.known) >= maxCoverageEntries {
		for k, old := range c.known {
			if e.at.Sub(old.at) >= c.ttl {
				delete(c.known, k)
			}
		}
		if len(c.known) >= maxCoverageEntries {
			return
		}
	}
	c.known[gr] = e
}
