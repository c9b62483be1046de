package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

func admissionReportGVR(namespace string) schema.GroupVersionResource {
	if namespace == "" {
		return apiresources.ClusterAdmissionReport
	}
	return apiresources.AdmissionReport
}

// entry is a batch of admission results for one resource.
type entry struct {
	uid, namespace string
	owner          metav1.OwnerReference
	// gvr and hash label the report; they describe the object as of at.
	gvr  schema.GroupVersionResource
	hash string
	at   time.Time
	// policyLabels are "cpol.kyverno.io/<name>" / "pol.kyverno.io/<name>" =
	// the policy's resourceVersion.
	policyLabels map[string]string
	results      []wgv1alpha2.PolicyReportResult
	// fresh: the resource was just created (a CREATE request), so its
	// report most likely does not exist yet: the write tries a create first
	// instead of a GET that would find nothing. A merged later request keeps
	// the first one's flag.
	fresh bool
	// attempts counts the failed writes of this entry; notBefore is when
	// the next may be tried.
	attempts  int
	notBefore time.Time
}

// newer reports whether a is strictly newer than b.
func newer(a, b metav1.Timestamp) bool {
	if a.Seconds != b.Seconds {
		return a.Seconds > b.Seconds
	}
	return a.Nanos > b.Nanos
}

func stamp(t time.Time) metav1.Timestamp {
	return metav1.Timestamp{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

// merge folds a newer batch of the same resource into e.
func (e *entry) merge(n *entry) {
	e.results = report.FoldAdmission(e.results, n.results)
	if !n.at.Before(e.at) {
		e.at, e.owner = n.at, n.owner
		if n.hash != "" {
			e.hash = n.hash
		}
		if n.gvr.Version != "" {
			e.gvr = n.gvr
		}
		if e.policyLabels == nil {
			e.policyLabels = map[string]string{}
		}
		maps.Copy(e.policyLabels, n.policyLabels)
	} else {
		for k, v := range n.policyLabels {
			if _, ok := e.policyLabels[k]; !ok {
				if e.policyLabels == nil {
					e.policyLabels = map[string]string{}
				}
				e.policyLabels[k] = v
			}
		}
	}
	if e.gvr.Version == "" {
		e.gvr = n.gvr
	}
	// A write that keeps failing keeps its backoff, whatever joins it.
	e.attempts = max(e.attempts, n.attempts)
	if n.notBefore.After(e.notBefore) {
		e.notBefore = n.notBefore
	}
}

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	// FlushInterval is how often aggregated results are written (default
	// 500ms); it is also the first retry delay of a failed write.
	FlushInterval time.Duration
	// Workers write reports in parallel during a flush (default 4).
	Workers int
	// MaxAttempts bounds the writes of one batch that fail for a reason that
	// may pass (default 12); RetryCap bounds the delay between two (default
	// 1m). With the defaults a batch is given up after about 6 minutes.
	MaxAttempts int
	RetryCap    time.Duration
	Registry    prometheus.Registerer
	Clock       clock.WithTicker
	// MaxPending bounds the resources whose results wait to be written
	// (default 10 x maxPending). Past it the results of one more resource
	// are not kept (dropped, reason overflow) and OnOverflow, when set, is
	// told its UID: tally-scanner rescans the resource instead, so that its
	// background results stand in for what was lost.
	MaxPending int
	OnOverflow func(uid string)
}

// Recorder aggregates admission results per resource UID and writes them in
// batches: at most one AdmissionReport per resource, never one per request.
//
// A write the API server refuses for good (the namespace is gone or
// terminating, the report is invalid, the write is forbidden) is dropped at
// once with a log line and a metric: retrying cannot succeed, and a batch
// kept until its namespace is created again would describe a resource that
// no longer exists. Other failures are retried with exponential backoff, at
// most MaxAttempts times.
type Recorder struct {
	client  dynamic.Interface
	metrics *recorderMetrics
	clock   clock.WithTicker
	opts    RecorderOptions

	mu      sync.Mutex
	pending map[string]*entry
	kick    chan struct{}
}

// maxPending bounds the resources waiting for a flush; past it a flush is
// started at once.
const maxPending = 2000

// NewRecorder builds a Recorder; Run writes.
func NewRecorder(client dynamic.Interface, opts RecorderOptions) *Recorder {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = 500 * time.Millisecond
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 12
	}
	if opts.RetryCap <= 0 {
		opts.RetryCap = time.Minute
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 10 * maxPending
	}
	r := &Recorder{client: client, clock: opts.Clock, opts: opts, pending: map[string]*entry{}, kick: make(chan struct{}, 1)}
	r.metrics = newRecorderMetrics(opts.Registry, func() float64 { return float64(r.pendingCount()) })
	return r
}

// add queues a batch of results for the next flush. Its results are bound
// to its content hash.
func (r *Recorder) add(e *entry) {
	e.results = report.BindHash(e.results, e.hash)
	r.mu.Lock()
	prev, ok := r.pending[e.uid]
	full := !ok && len(r.pending) >= r.opts.MaxPending
	switch {
	case ok:
		prev.merge(e)
	case !full:
		r.pending[e.uid] = e
	}
	n := len(r.pending)
	r.mu.Unlock()
	if full {
		r.metrics.dropped.WithLabelValues(dropOverflow).Inc()
		if r.opts.OnOverflow != nil {
			r.opts.OnOverflow(e.uid)
		}
	}
	if n >= maxPending {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

func (r *Recorder) pendingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Run flushes every interval until ctx ends, then once more with a short
// deadline so that results of the last requests are not lost on shutdown.
func (r *Recorder) Run(ctx context.Context) {
	t := r.clock.NewTicker(r.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			r.flush(final, true)
			cancel()
			return
		case <-t.C():
		case <-r.kick:
		}
		r.flush(ctx, false)
	}
}

// Reasons a batch is dropped (the label of the dropped-batches metric).
const (
	dropNamespaceGone = watch.RefusedNamespaceGone
	dropInvalid       = watch.RefusedInvalid
	dropForbidden     = watch.RefusedForbidden
	dropNotServed     = watch.RefusedNotServed
	dropAttempts      = "attempts"
	dropPanicked      = "panicked"
	dropOverflow      = "overflow" // MaxPending resources wait already
)

// backoff is the delay before attempt n+1 of a write that failed n times.
func (r *Recorder) backoff(n int) time.Duration {
	d := r.opts.FlushInterval
	for i := 1; i < n && d < r.opts.RetryCap; i++ {
		d *= 2
	}
	return min(d, r.opts.RetryCap)
}

// flush writes every pending entry that is due (all of them when final);
// an entry that fails for a reason that may pass goes back to pending with
// a backoff, any other is dropped.
func (r *Recorder) flush(ctx context.Context, final bool) {
	now := r.clock.Now()
	r.mu.Lock()
	batch := make([]*entry, 0, len(r.pending))
	for uid, e := range r.pending {
		if final || !now.Before(e.notBefore) {
			batch = append(batch, e)
			delete(r.pending, uid)
		}
	}
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	log := logr.FromContextOrDiscard(ctx)
	work := make(chan *entry)
	var wg sync.WaitGroup
	for range r.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				r.settle(ctx, log, e, r.safeWrite(ctx, e))
			}
		}()
	}
	for _, e := range batch {
		work <- e
	}
	close(work)
	wg.Wait()
}

// errWritePanicked: writing a batch panicked; it is dropped, not retried
// (the same batch would panic again).
var errWritePanicked = errors.New("writing the admission report panicked")

// safeWrite is write, with a panic turned into errWritePanicked: one bad
// batch never takes the webhook's process down.
func (r *Recorder) safeWrite(ctx context.Context, e *entry) (err error) {
	defer func() {
		if p := recover(); p != nil {
			logr.FromContextOrDiscard(ctx).Error(errWritePanicked, "recovered", "uid", e.uid, "namespace", e.namespace)
			err = errWritePanicked
		}
	}()
	return r.write(ctx, e)
}

// settle acts on the outcome of one write.
func (r *Recorder) settle(ctx context.Context, log logr.Logger, e *entry, err error) {
	if err == nil {
		return
	}
	if ctx.Err() != nil {
		return // shutting down: the batch is lost with the process (see docs)
	}
	r.metrics.reportWrites.WithLabelValues("error").Inc()
	reason := watch.Refused(err)
	if errors.Is(err, errWritePanicked) {
		reason = dropPanicked
	}
	if reason == "" && e.attempts+1 >= r.opts.MaxAttempts {
		reason = dropAttempts
	}
	if reason != "" {
		log.Error(err, "admission report write dropped", "uid", e.uid, "namespace", e.namespace, "reason", reason, "attempts", e.attempts+1)
		r.metrics.dropped.WithLabelValues(reason).Inc()
		return
	}
	e.attempts++
	e.notBefore = r.clock.Now().Add(r.backoff(e.attempts))
	log.V(1).Info("admission report write failed; retrying", "uid", e.uid, "attempt", e.attempts, "retryIn", r.backoff(e.attempts).String(), "error", err.Error())
	r.add(e)
}

// write merges e into the resource's report: get, merge the newest result
// per (content hash, policy, rule), drop the sections of content the
// resource no longer has (prune), then update or create, again on conflicts.
func (r *Recorder) write(ctx context.Context, e *entry) error {
	ri := r.client.Resource(admissionReportGVR(e.namespace)).Namespace(e.namespace)
	return retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		// create writes the report of a resource that has none.
		create := func() error {
			u, err := desired(nil, kyvernov2.AdmissionReport{}, e, r.prune(ctx, e, e.results))
			if err != nil {
				return err
			}
			if _, err := ri.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
				return err
			}
			r.metrics.reportWrites.WithLabelValues("create").Inc()
			return nil
		}
		if e.fresh && len(e.results) > 0 {
			err := create()
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
			e.fresh = false // another replica wrote it first: read and merge
		}
		cur, err := ri.Get(ctx, e.uid, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if len(e.results) == 0 {
				return nil // nothing to report
			}
			err := create()
			if apierrors.IsAlreadyExists(err) {
				r.metrics.reportWrites.WithLabelValues("conflict").Inc()
			}
			return err
		case err != nil:
			return fmt.Errorf("get %s %s/%s: %w", kindOf(e.namespace), e.namespace, e.uid, err)
		}
		have := stored(cur)
		u, err := desired(cur, have, e, r.prune(ctx, e, report.FoldAdmission(have.Spec.Results, e.results)))
		if err != nil {
			return err
		}
		if u == nil {
			return nil // nothing newer than what is stored
		}
		if _, err := ri.Update(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			if apierrors.IsConflict(err) {
				r.metrics.reportWrites.WithLabelValues("conflict").Inc()
			}
			return err
		}
		r.metrics.reportWrites.WithLabelValues("update").Inc()
		return nil
	})
}

// stored reads a stored admission report: its spec.results followed by the
// entries packed in its annotation; results written before sections carry
// no hash and are bound to the report's hash label.
func stored(cur *unstructured.Unstructured) kyvernov2.AdmissionReport {
	var have kyvernov2.AdmissionReport
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &have); err != nil {
		// Unreadable: replace its spec with what we know.
		return kyvernov2.AdmissionReport{}
	}
	results, err := report.IntermediateResults(have.Spec.Results, cur.GetAnnotations())
	if err != nil {
		return kyvernov2.AdmissionReport{} // unreadable entries: replaced by what we know
	}
	have.Spec.Results = report.BindHash(results, cur.GetLabels()[report.LabelResourceHash])
	return have
}

const fieldManager = "tally-admission"

func kindOf(namespace string) string {
	if namespace == "" {
		return "ClusterAdmissionReport"
	}
	return "AdmissionReport"
}

// desired builds the report of e's resource holding results, the merge of
// have (cur's report, read by stored) and e (cur nil: a new report). It
// returns nil when cur already holds exactly that.
func desired(cur *unstructured.Unstructured, have kyvernov2.AdmissionReport, e *entry, results []wgv1alpha2.PolicyReportResult) (*unstructured.Unstructured, error) {
	labels := map[string]string{}
	if cur != nil {
		maps.Copy(labels, cur.GetLabels())
	}
	// The hash, GVR and owner follow the newest side.
	var newestHave metav1.Timestamp
	for _, res := range have.Spec.Results {
		if newer(res.Timestamp, newestHave) {
			newestHave = res.Timestamp
		}
	}
	owner := e.owner
	if cur == nil || !newer(newestHave, stamp(e.at)) || labels[report.LabelResourceHash] == "" {
		if e.hash != "" { // an older report may carry none
			labels[report.LabelResourceHash] = e.hash
		}
		if e.gvr.Version != "" {
			report.ResourceTypeLabels(labels, e.gvr, e.owner.Kind)
		}
	} else if have.Spec.Owner.UID != "" {
		owner = have.Spec.Owner
	}
	labels[report.LabelResourceUID] = e.uid
	labels[report.LabelManagedBy] = report.ManagedBy
	keep := map[string]bool{}
	for _, res := range results {
		keep[policyLabelKey(res.Policy)] = true
	}
	for k, v := range e.policyLabels {
		if _, ok := labels[k]; !ok || !newer(newestHave, stamp(e.at)) {
			labels[k] = v
		}
	}
	for k := range labels { // policies without results lose their label
		if (strings.HasPrefix(k, "cpol.kyverno.io/") || strings.HasPrefix(k, "pol.kyverno.io/")) && !keep[k] {
			delete(labels, k)
		}
	}
	spec := kyvernov2.ReportSpec{Owner: owner, Results: results, Summary: wgv1alpha2.SummaryOf(results)}
	if cur != nil && maps.Equal(labels, cur.GetLabels()) && equalSpec(have.Spec, spec) {
		return nil, nil
	}
	// The entries go as one string (report.AnnotationResults), as the
	// scanner writes them: the API server stores a string instead of
	// decoding, coercing and validating every field of every entry.
	annotations := map[string]string{}
	if cur != nil {
		maps.Copy(annotations, cur.GetAnnotations())
	}
	packed, fits, err := report.PackResults(results)
	if err != nil {
		return nil, fmt.Errorf("encode report of %s: %w", e.uid, err)
	}
	written := spec
	if fits {
		annotations[report.AnnotationResults] = packed
		written.Results = nil
	} else {
		delete(annotations, report.AnnotationResults) // too large: in spec.results
	}
	specMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&written)
	if err != nil {
		return nil, fmt.Errorf("convert report of %s: %w", e.uid, err)
	}
	labelMap := make(map[string]any, len(labels))
	for k, v := range labels {
		labelMap[k] = v
	}
	md := map[string]any{"name": e.uid, "labels": labelMap}
	if owner.UID != "" && owner.APIVersion != "" && owner.Kind != "" && owner.Name != "" {
		// The garbage collector deletes the report with its resource.
		md["ownerReferences"] = []any{map[string]any{
			"apiVersion": owner.APIVersion, "kind": owner.Kind, "name": owner.Name, "uid": string(owner.UID),
		}}
	}
	if e.namespace != "" {
		md["namespace"] = e.namespace
	}
	if cur != nil {
		md["resourceVersion"] = cur.GetResourceVersion()
	}
	if len(annotations) > 0 {
		a := make(map[string]any, len(annotations))
		for k, v := range annotations {
			a[k] = v
		}
		md["annotations"] = a
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kyvernov2.GroupVersion.String(),
		"kind":       kindOf(e.namespace),
		"metadata":   md,
		"spec":       specMap,
	}}, nil
}

func equalSpec(a, b kyvernov2.ReportSpec) bool {
	if a.Owner.UID != b.Owner.UID || a.Owner.Name != b.Owner.Name || a.Owner.Kind != b.Owner.Kind || a.Owner.APIVersion != b.Owner.APIVersion {
		return false
	}
	if len(a.Results) != len(b.Results) || a.Summary != b.Summary {
		return false
	}
	for i := range a.Results {
		x, y := a.Results[i], b.Results[i]
		if x.Policy != y.Policy || x.Rule != y.Rule || x.Result != y.Result || x.Message != y.Message || x.Timestamp != y.Timestamp ||
			report.HashOf(&x, "") != report.HashOf(&y, "") {
			return false
		}
	}
	return true
}

// policyLabelKey is the report label of a policy by its report name.
func policyLabelKey(policy string) string {
	if _, name, ok := strings.Cut(policy, "/"); ok {
		return "pol.kyverno.io/" + name
	}
	return "cpol.kyverno.io/" + policy
}
