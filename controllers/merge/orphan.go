package merge

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
)

// Orphaned intermediate reports.
//
// An intermediate report whose resource is gone must go (R19). When the
// report carries an ownerReference to its resource, Kubernetes' garbage
// collector deletes it; the merger checks the others: reports written by
// other tools without ownerReferences, and reports of resources deleted while
// nothing watched them.
//
// The check is one GET of the resource by name, made only for a resource
// whose reports have not changed for OrphanGrace (a report being written is
// not orphaned), at most OrphanQPS per second, and again for a live resource
// only after OrphanRecheck. A report is deleted only when the API server
// answered that the named resource does not exist, or that the object of
// that name has another UID (it was deleted and re-created); any other answer
// (an unknown kind, a forbidden read, a timeout, no way to tell the kind)
// keeps the report. The delete carries the report's UID and
// resourceVersion as preconditions, so a report changed since it was read
// is never deleted.

// orphanChecker finds the intermediate reports of resources gone that the
// garbage collector cannot delete, and deletes them (orphan.go).
type orphanChecker struct {
	*state
	cl *cluster
	w  *finalWriter
}

// orphanCandidate is a resource whose unowned reports need a look.
type orphanCandidate struct {
	uid     string
	subject ownerRef
	reports []reportRef
}

// candidates lists the resources due for an orphan check at now.
func (m *orphanChecker) orphanCandidates(now time.Time) []orphanCandidate {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []orphanCandidate
	for uid, st := range m.states {
		if now.Sub(st.updated) < m.opts.OrphanGrace || (!st.checked.IsZero() && now.Sub(st.checked) < m.opts.OrphanRecheck) {
			continue
		}
		var refs []reportRef
		unowned := false
		retained := false
		for _, part := range []*reportPart{&st.admission, &st.background} {
			switch {
			case part.present && part.retained:
				// Its report is gone already; its results stay until the
				// resource is found gone.
				retained = true
			case part.present:
				refs = append(refs, part.ref)
				unowned = unowned || !part.ref.owned
			}
		}
		if !unowned && !retained {
			continue // the garbage collector deletes them with their resource
		}
		out = append(out, orphanCandidate{uid: uid, reports: refs, subject: subjectRef(st)})
	}
	return out
}

// collectOrphans checks the candidates every tick until ctx ends.
func (m *orphanChecker) collectOrphans(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx).WithName("orphans")
	limiter := flowcontrol.NewTokenBucketRateLimiter(float32(m.opts.OrphanQPS), max(1, int(m.opts.OrphanQPS)))
	defer limiter.Stop()
	ticker := m.opts.Clock.NewTicker(m.opts.OrphanTick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		for _, c := range m.orphanCandidates(m.opts.Now()) {
			if err := limiter.Wait(ctx); err != nil {
				return
			}
			m.queue.Protect(ctx, "orphan check", func() {
				if err := m.checkOrphan(ctx, c); err != nil {
					log.V(1).Info("orphan check inconclusive; reports kept", "uid", c.uid, "error", err.Error())
				}
			})
		}
	}
}

// checkOrphan deletes the reports of c if its resource is gone.
func (m *orphanChecker) checkOrphan(ctx context.Context, c orphanCandidate) error {
	gone, err := m.cl.resourceGone(ctx, c.uid, c.subject)
	if err != nil {
		m.metrics.checks.WithLabelValues("unknown").Inc()
		return err
	}
	if !gone {
		m.metrics.checks.WithLabelValues("alive").Inc()
		m.mu.Lock()
		if st := m.states[c.uid]; st != nil {
			st.checked = m.opts.Now()
		}
		m.mu.Unlock()
		return nil
	}
	m.metrics.checks.WithLabelValues("gone").Inc()
	m.mu.Lock()
	m.dropRetained(c.uid)
	m.mu.Unlock()
	m.queue.Add(c.uid) // its final report, if the garbage collector has not deleted it yet, goes
	for _, r := range c.reports {
		if r.folded {
			if err := m.w.deleteFolded(ctx, c.uid, ""); err != nil {
				return err
			}
			continue
		}
		err := m.client.Resource(r.gvr).Namespace(r.namespace).Delete(ctx, r.name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &r.uid, ResourceVersion: &r.resourceVersion},
		})
		switch {
		case err == nil:
			m.metrics.orphans.WithLabelValues(r.gvr.Resource).Inc()
			logr.FromContextOrDiscard(ctx).V(1).Info("orphaned report deleted", "resource", r.gvr.Resource, "namespace", r.namespace, "name", r.name)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// already gone, or changed since it was read: looked at again later
		default:
			return fmt.Errorf("delete orphaned %s %s/%s: %w", r.gvr.Resource, r.namespace, r.name, err)
		}
	}
	return nil
}
