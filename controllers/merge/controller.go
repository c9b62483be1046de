package merge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// Merger keeps every resource's final report equal to Merge of its
// intermediate reports. It runs layers, each of which calls only those
// beneath it: the intake of the watches (intake: sink.go, fold.go,
// adopt.go), the verifier of admission reports' content (verifier:
// verify.go), the final writer (finalWriter: final.go, merged.go,
// owned.go) and the orphan checker (orphanChecker: orphan.go); beneath
// them all, the state with its lock (state: state.go, of the records of
// resource.go and reports.go) and the cluster reads and deletes they share
// (cluster: cluster.go). The merge itself is a pure function (Merge,
// matrix.go). The Merger seeds, starts the watches and reconciles each
// resource through its layers.
type Merger struct {
	st   *state
	cl   *cluster
	in   *intake
	ver  *verifier
	w    *finalWriter
	orph *orphanChecker
}

// SetBackground sets Options.Background for the next Run: the hand-over of
// the scanner's run the merger follows (handover.IncarnationPath).
func (m *Merger) SetBackground(c dynamic.Interface) {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	m.st.opts.Background = c
}

// SetShard sets Options.Shard for the next Run (the shard of the scanner
// beside it, which may change between runs).
func (m *Merger) SetShard(owns func(namespace string) bool) {
	m.st.shard.Store(&owns)
}

// New builds a Merger; Run starts it.
func New(client dynamic.Interface, opts Options) *Merger {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.OrphanGrace <= 0 {
		opts.OrphanGrace = DefaultOrphanGrace
	}
	if opts.OrphanRecheck <= 0 {
		opts.OrphanRecheck = DefaultOrphanRecheck
	}
	if opts.OrphanQPS <= 0 {
		opts.OrphanQPS = DefaultOrphanQPS
	}
	if opts.OrphanTick <= 0 {
		opts.OrphanTick = min(opts.OrphanGrace, 30*time.Second)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ManagedBy == "" {
		opts.ManagedBy = report.ManagedBy
	}
	if opts.ReportAPI == "" {
		opts.ReportAPI = report.APIWGPolicy
	}
	if opts.Background == nil {
		opts.Background = client
	}
	st := &state{opts: opts, client: client}
	cl := &cluster{client: client, opts: &st.opts}
	w := &finalWriter{state: st, cl: cl, out: watch.Writer{Client: client, FieldManager: fieldManager}}
	m := &Merger{st: st, cl: cl, w: w,
		in:   &intake{state: st, cl: cl},
		ver:  &verifier{state: st, cl: cl},
		orph: &orphanChecker{state: st, cl: cl, w: w},
	}
	m.reset()
	queue := func() *watch.Queue {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.queue
	}
	st.metrics = newMetrics(opts.Registry, func() float64 { return float64(queue().Len()) }, func() float64 { return float64(queue().Panics() + watch.SinkPanics()) })
	m.SetShard(opts.Shard)
	return m
}

// reset forgets everything a Run learnt: a Run after another (the merger
// paused while the scanner beside it was not ready) starts afresh from the
// final reports.
func (m *Merger) reset() {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if m.st.queue != nil {
		// The last Run's queue is shut down already; the one New made,
		// never run, is not: its delaying goroutine ends here.
		m.st.queue.ShutDown()
	}
	m.st.queue = watch.NewQueue("tally-merge")
	m.st.listed = map[schema.GroupVersionResource]bool{}
	m.st.sources = nil
	m.st.states = map[string]*resourceState{}
	m.st.strings = map[string]string{}
	m.st.metas = map[string]*resultMeta{}
	m.st.internLive = 0
	m.st.kinds = nil
	m.st.allListed = make(chan struct{})
	m.st.policies = map[string]PolicyInfo{}
	m.st.policyKinds = map[string]schema.GroupVersionResource{}
	m.st.written = map[string]report.Written{}
	m.st.writing = map[string]*inflight{}
	m.st.seeds = nil
	m.st.folds = map[string]*fold{}
	m.st.unadopted = map[string]unadopted{}
}

// servedKinds returns those of gvrs the API server serves and the merger
// may read: a list answered NotFound (no CRD) or Forbidden (RBAC without
// the group) leaves the kind out, with a log line, so that the rest is
// merged all the same (the CEL policy kinds; Kyverno's EphemeralReports
// where Kyverno is older). A kind that cannot be listed for another reason
// is watched: its watch retries with backoff.
func (m *Merger) servedKinds(ctx context.Context, gvrs ...schema.GroupVersionResource) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, gvr := range gvrs {
		_, err := m.st.client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			logr.FromContextOrDiscard(ctx).Info("kind not watched: its results are not merged", "resource", gvr.String(), "reason", err.Error())
			continue
		}
		out = append(out, gvr)
	}
	return out
}

// Run seeds from the existing final reports, watches, and reconciles until
// ctx ends. It may be called again once it has returned.
func (m *Merger) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("merge")
	ctx = logr.NewContext(ctx, log)
	m.reset()
	defer m.st.queue.ShutDown()
	if m.st.opts.RESTConfig != nil {
		raw, err := watch.NewRawClient(m.st.opts.RESTConfig, m.st.opts.ReportAPI.GroupVersion())
		if err != nil {
			return fmt.Errorf("final report client: %w", err)
		}
		m.w.out.Raw = raw
	}
	if err := m.seed(ctx); err != nil {
		return fmt.Errorf("read existing policy reports: %w", err)
	}
	// Beside Kyverno 1.13+ no AdmissionReport kind is served: tally writes
	// none there, and Kyverno's EphemeralReports are read instead.
	policyKinds := catalog.GVRs(nil, catalog.CEL, catalog.AdmissionPolicy)
	kinds := append(slices.Clone(watched), m.servedKinds(ctx, append([]schema.GroupVersionResource{apiresources.AdmissionReport, apiresources.ClusterAdmissionReport}, policyKinds...)...)...)
	if m.st.opts.Ingest {
		kinds = append(kinds, m.servedKinds(ctx, ephemeralKinds...)...)
		kinds = append(kinds, m.servedKyvernoOnlyKinds(ctx)...)
	}
	m.st.mu.Lock()
	m.st.kinds = kinds
	if m.st.opts.Metadata != nil {
		owned := &finalReports{m: m.st, listed: map[schema.GroupVersionResource]bool{}}
		namespaced, cluster := m.st.opts.ReportAPI.FinalGVRs()
		for _, gvr := range []schema.GroupVersionResource{namespaced, cluster} {
			m.st.sources = append(m.st.sources, watch.StartMetadata(ctx, m.st.opts.Metadata, gvr, report.LabelManagedBy+"="+m.st.opts.ManagedBy, owned))
		}
	}
	for _, gvr := range kinds {
		client := m.st.client
		if gvr == apiresources.BackgroundScanReport || gvr == apiresources.ClusterBackgroundScanReport {
			client = m.st.opts.Background
		}
		m.st.sources = append(m.st.sources, watch.Start(ctx, client, gvr, m.in))
	}
	m.st.mu.Unlock()
	var wg sync.WaitGroup
	for range m.st.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-m.st.allListed:
			case <-ctx.Done():
				return
			}
			for m.processNext(ctx) {
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.orph.collectOrphans(ctx)
	}()
	<-ctx.Done()
	m.st.queue.ShutDown()
	for _, s := range m.st.sources {
		s.Stop()
	}
	wg.Wait()
	return nil
}

// Close releases what New made for a Merger that may never have run (its
// queue's goroutine); a Merger is not run after it.
func (m *Merger) Close() {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	m.st.queue.ShutDown()
}

// Synced reports whether every watched kind was listed and the queue is empty.
func (m *Merger) Synced() bool {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	for _, g := range m.st.watchedKinds() {
		if !m.st.listed[g] {
			return false
		}
	}
	return m.st.queue.Idle()
}

func (m *Merger) processNext(ctx context.Context) bool {
	return m.st.queue.ProcessNext(ctx, "merge", m.reconcile)
}

// reconcile writes the final report of one resource if it differs from what
// was written, and deletes it when no result remains.
func (m *Merger) reconcile(ctx context.Context, uid string) error {
	if isAdoptKey(uid) {
		return m.in.adopt(ctx, uid)
	}
	m.st.mu.Lock()
	var v *verification
	if st := m.st.states[uid]; st != nil {
		v = admissionVerification(st)
	}
	m.st.mu.Unlock()
	if v != nil {
		if err := m.ver.verify(ctx, uid, v); err != nil {
			var notYet *notYetError
			if errors.As(err, &notYet) {
				// Nothing merged, nothing deleted: the report waits for
				// its resource (verify.go).
				m.st.queue.AddAfter(uid, notYet.after)
				return nil
			}
			if !contentUnreadable(err) {
				return err // retried with backoff
			}
			logr.FromContextOrDiscard(ctx).Info("admission results cannot be tied to the resource's content; used as they are", "uid", uid, "error", err.Error())
			m.st.mu.Lock()
			if st := m.st.states[uid]; st != nil && st.admission.present && admissionKey(&st.admission) == v.hash {
				st.admission.checkedHash, st.admission.unverifiable = v.hash, true
			}
			m.st.mu.Unlock()
		}
	}
	m.st.mu.Lock()
	st := m.st.states[uid]
	in := Input{Policies: m.st.policies, Filter: m.st.opts.Filter}
	var subject report.Subject
	// merged is the AdmissionReport this merge includes: once the final
	// report holds it, it is deleted (merged.go); retained says its results
	// are kept from an earlier merge. withheld: a section newer than those
	// that count did not count (yet).
	var merged *reportRef
	var retained, withheld bool
	var updated time.Time
	if st != nil {
		subject = st.subject
		if a := &st.admission; a.present && !a.retained {
			ref := a.ref
			merged = &ref
		}
		retained, updated = st.admission.retained, st.updated
		var admission []compactResult
		var boundTo string
		admission, boundTo, withheld = m.ver.admissionResults(st)
		in.Admission, in.Background = expand(admission), expand(st.background.results)
		// The background results describe the content the admission
		// results that count were computed for (or none count).
		in.BackgroundCurrent = st.background.present && (len(admission) == 0 || st.background.hash == boundTo)
	}
	prev, hadReport := m.st.written[uid]
	m.st.mu.Unlock()

	var results []wgv1alpha2.PolicyReportResult
	if st != nil {
		results = Merge(in)
	}
	// done deletes the AdmissionReport merged, now that the final report
	// holds what counts of it (merged.go).
	done := func() error {
		return m.w.afterMerge(ctx, uid, merged, retained, withheld, updated, chosenFrom(results, in.Admission))
	}
	if len(results) == 0 {
		if !hadReport {
			return done()
		}
		gvr := m.st.opts.ReportAPI.FinalGVR(prev.Namespace)
		err := m.st.client.Resource(gvr).Namespace(prev.Namespace).Delete(ctx, uid, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete final report %s/%s: %w", prev.Namespace, uid, err)
		}
		m.st.metrics.writes.WithLabelValues("delete").Inc()
		m.st.mu.Lock()
		delete(m.st.written, uid)
		m.st.mu.Unlock()
		return done()
	}
	final, body, digest, err := finalBody(m.st.opts.ReportAPI, subject, results, m.st.opts.ManagedBy)
	if err != nil {
		return fmt.Errorf("render final report of %s: %w", uid, err)
	}
	if hadReport && prev.Digest == digest {
		return done()
	}
	if !hadReport {
		// Deleted by someone else: written again only while its resource
		// exists (owned.go).
		if ok, err := m.w.recreateAllowed(ctx, uid); err != nil || !ok {
			return err
		}
	}
	gvr := m.st.opts.ReportAPI.FinalGVR(subject.Namespace)
	name := final.Metadata.Name
	m.st.startWrite(uid)
	rv, err := m.w.writeFinal(ctx, gvr, &final, body, hadReport)
	if err != nil {
		m.st.endWrite(uid)
		if reason := watch.Refused(err); reason != "" {
			// Refused for good (namespace gone or terminating, invalid,
			// forbidden, kind not served): retrying the same write cannot
			// succeed. It is tried again when the resource's reports change.
			logr.FromContextOrDiscard(ctx).Error(err, "final report write refused; dropped", "namespace", subject.Namespace, "name", name, "reason", reason)
			m.st.metrics.dropped.WithLabelValues(reason).Inc()
			return nil
		}
		return fmt.Errorf("write final report %s/%s: %w", subject.Namespace, name, err)
	}
	op := "update"
	if !hadReport {
		op = "create"
	}
	m.st.metrics.writes.WithLabelValues(op).Inc()
	m.st.mu.Lock()
	m.st.written[uid] = report.Written{Namespace: subject.Namespace, Digest: digest, ResourceVersion: rv}
	m.st.mu.Unlock()
	if others := m.st.endWrite(uid); others {
		// The watch showed another version while it was written: someone
		// else's write, or the merger's own seen before its answer.
		if err := m.w.checkWritten(ctx, gvr, subject.Namespace, uid, rv); err != nil {
			return err
		}
	}
	return done()
}

const seedPageSize = 100

// seed reads the final reports already written, so that unchanged ones are
// not written again after a restart or failover.
func (m *Merger) seed(ctx context.Context) error {
	selector := report.LabelManagedBy + "=" + m.st.opts.ManagedBy
	namespaced, cluster := m.st.opts.ReportAPI.FinalGVRs()
	// Small pages: a final report with its managedFields decodes to tens of
	// KiB, and only its digest is kept.
	opts := metav1.ListOptions{LabelSelector: selector, Limit: seedPageSize}
	for _, gvr := range []schema.GroupVersionResource{namespaced, cluster} {
		err := watch.ListByNamespace(ctx, m.st.client, gvr, gvr == namespaced, opts, m.st.owns, func(items []unstructured.Unstructured) error {
			for i := range items {
				if !m.st.owns(items[i].GetNamespace()) {
					continue // another replica's shard
				}
				m.seedOne(&items[i])
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// seedOne records one final report read back at start-up.
func (m *Merger) seedOne(u *unstructured.Unstructured) {
	var r wgv1alpha2.PolicyReport
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r)
	if err != nil || !m.trustedSeed(u, &r) {
		// Not what the merger wrote (R48): its content counts for nothing,
		// and the merge writes it again, or deletes it when its name is no
		// resource's.
		m.st.mu.Lock()
		m.st.written[u.GetName()] = report.Written{Namespace: u.GetNamespace()}
		m.st.mu.Unlock()
		m.st.metrics.putRight.WithLabelValues("read-back-refused").Inc()
		return
	}
	s := report.Subject{APIVersion: r.Scope.APIVersion, Kind: r.Scope.Kind, Namespace: r.Scope.Namespace, Name: r.Scope.Name, UID: r.Scope.UID}
	_, _, d, err := finalBody(m.st.opts.ReportAPI, s, r.Results, m.st.opts.ManagedBy)
	if err != nil {
		return
	}
	// A time in the future would win every merge: clamped.
	now := metav1.Timestamp{Seconds: m.st.opts.Now().Unix()}
	for j := range r.Results {
		if after(r.Results[j].Timestamp, now) {
			r.Results[j].Timestamp = now
		}
	}
	m.st.mu.Lock()
	m.st.written[r.Name] = report.Written{Namespace: r.Namespace, Digest: d, ResourceVersion: u.GetResourceVersion()}
	// Admission results live on in the final report once their
	// AdmissionReport is deleted: read back (seedAdmission, once the
	// policies are listed).
	m.st.keepSeed(&r, s)
	m.st.mu.Unlock()
}

// trustedSeed says whether a final report read back at start-up is one
// the merger wrote (R48): its content is signed with the merger's key (or,
// with LegacySeeds, an unsigned one's last writer is the merger), it is
// named by the UID of the resource its scope names, and that resource is
// of the report's own namespace (the shard was checked by the caller).
func (m *Merger) trustedSeed(u *unstructured.Unstructured, r *wgv1alpha2.PolicyReport) bool {
	if r.Scope == nil || string(r.Scope.UID) != u.GetName() || r.Scope.Namespace != u.GetNamespace() {
		return false
	}
	sig, signed := u.GetAnnotations()[AnnotationSignature]
	if !signed {
		return (m.st.opts.LegacySeeds || len(m.st.opts.Key) == 0) && lastWriter(u, fieldManager)
	}
	s := report.Subject{APIVersion: r.Scope.APIVersion, Kind: r.Scope.Kind, Namespace: r.Scope.Namespace, Name: r.Scope.Name, UID: r.Scope.UID}
	_, body, _, err := finalBody(m.st.opts.ReportAPI, s, r.Results, m.st.opts.ManagedBy)
	return err == nil && validSignature(m.st.opts.Key, body, sig)
}

// servedKyvernoOnlyKinds are those kinds served, each in its newest served
// version.
func (m *Merger) servedKyvernoOnlyKinds(ctx context.Context) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, k := range catalog.Kinds(catalog.KyvernoOnly) {
		for _, v := range k.Versions {
			gvr := schema.GroupVersionResource{Group: k.GVR.Group, Version: v, Resource: k.GVR.Resource}
			if served := m.servedKinds(ctx, gvr); len(served) > 0 {
				out = append(out, gvr)
				break
			}
		}
	}
	return out
}
