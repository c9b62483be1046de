package merge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/catalog"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/report"
)

// Labels the merger reads.
const fieldManager = "tally-merger"

// Options configure a Merger.
type Options struct {
	Workers  int
	Filter   Filter
	Registry prometheus.Registerer
	// Mapper finds the resource type of a report's resource when the report
	// has no audit.kyverno.io/resource.gvr label (nil: such reports are
	// never checked for orphans).
	Mapper meta.RESTMapper
	// RESTConfig, when set, is used to apply final reports without decoding
	// the API server's answers (final.go); the dynamic client otherwise.
	RESTConfig *rest.Config
	// OrphanGrace, OrphanRecheck and OrphanQPS bound the orphan check
	// (orphan.go); OrphanTick is how often candidates are looked for.
	OrphanGrace, OrphanRecheck, OrphanTick time.Duration
	OrphanQPS                              float64
	// Key signs the final reports the merger writes (AnnotationSignature),
	// so that one read back at start-up counts only when the merger wrote
	// its content (R48). LegacySeeds also trusts, by their managedFields,
	// the unsigned reports of a version that did not sign (the key was made
	// by this start: none can be signed yet). Without a key (unit tests)
	// nothing is signed and every report is read back as with LegacySeeds.
	Key         []byte
	LegacySeeds bool
	// Now is the clock (default time.Now); Clock its tickers (default the
	// real clock; set with Now when a test fakes the time).
	Now   func() time.Time
	Clock clock.WithTicker
	// ManagedBy is the value of the app.kubernetes.io/managed-by label of
	// the final reports written, and the one the merger selects its own by
	// at start-up (default report.ManagedBy, "tally"). Beside Kyverno it is
	// "kyverno", so that Kyverno's tooling finds the reports.
	ManagedBy string
	// ReportAPI is the API the final reports are written in (default
	// wgpolicyk8s.io PolicyReports; openreports.io Reports).
	ReportAPI report.API
	// Background reads the BackgroundScanReports: the scanner's hand-over
	// beside the merger (handover.Hub, on loopback). Nil reads them from the
	// API server, as the client does everything else.
	Background dynamic.Interface
	// Shard, when set, is the namespaces this merger merges and writes ("":
	// the cluster-scoped reports): its scanner pair's shard
	// (shard.Assignment.Owns). Reports of other namespaces are neither
	// read back, merged, written nor deleted. Nil merges everything.
	Shard func(namespace string) bool
	// Metadata, when set, watches the final reports' metadata (selected by
	// ManagedBy), so that one someone else edits, creates or deletes is put
	// right within seconds (owned.go, R48); nil: they are put right at
	// their resource's next change or a restart.
	Metadata metadata.Interface
	// Ingest makes the merger read the admission reports of a Kyverno
	// admission controller beside it (EphemeralReports, and kyverno.io
	// AdmissionReports of Kyverno 1.10-1.12) and merge them, with tally's
	// own, as each resource's admission results, deleting each once merged
	// (fold.go).
	Ingest bool
}

// Merger keeps every resource's final report equal to Merge of its
// intermediate reports.
type Merger struct {
	opts    Options
	client  dynamic.Interface
	out     watch.Writer // Run sets out.Raw when opts.RESTConfig is
	queue   *watch.Queue
	metrics *metrics

	mu       sync.Mutex
	listed   map[schema.GroupVersionResource]bool
	sources  []*watch.Source
	states   map[string]*resourceState
	policies map[string]PolicyInfo
	// policyKinds are the kinds of the policies, by key (what a complete
	// list of a kind can tell gone).
	policyKinds map[string]schema.GroupVersionResource
	written     map[string]report.Written
	// writing are the final reports being written, with the
	// resourceVersions the watch showed meanwhile (owned.go).
	writing map[string]*inflight
	// seeds are the results of the final reports read at start-up, until
	// every kind is listed (merged.go).
	seeds map[string]seed
	// folds are the admission reports folded by resource (Options.Ingest).
	folds   map[string]*fold
	foldSeq int64
	// unadopted are Kyverno's admission reports that name their resource
	// without its UID, by queue key (adopt.go).
	unadopted map[string]unadopted
	// strings and metas hold the one copy of repeated values (state.go).
	strings map[string]string
	metas   map[string]*resultMeta
	// internLive is how many entries of strings and metas were live at
	// their last rebuild (releaseInterned).
	internLive int
	// kinds are the kinds watched (watched, and the CEL kinds served).
	kinds []schema.GroupVersionResource
	// shard is Options.Shard, as SetShard last set it.
	shard atomic.Pointer[func(namespace string) bool]
	// allListed is closed once every watched kind was listed: merging
	// earlier would write reports of a partial view (after a restart, a
	// resource whose policies are not listed yet would lose its entries).
	allListed chan struct{}
}

// SetBackground sets Options.Background for the next Run: the hand-over of
// the scanner's run the merger follows (handover.IncarnationPath).
func (m *Merger) SetBackground(c dynamic.Interface) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opts.Background = c
}

// SetShard sets Options.Shard for the next Run (the shard of the scanner
// beside it, which may change between runs).
func (m *Merger) SetShard(owns func(namespace string) bool) {
	m.shard.Store(&owns)
}

// owns reports whether a namespace's reports are this merger's to write.
func (m *Merger) owns(namespace string) bool {
	owns := m.shard.Load()
	return owns == nil || *owns == nil || (*owns)(namespace)
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
	m := &Merger{
		opts:   opts,
		client: client,
		out:    watch.Writer{Client: client, FieldManager: fieldManager},
	}
	m.reset()
	queue := func() *watch.Queue {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.queue
	}
	m.metrics = newMetrics(opts.Registry, func() float64 { return float64(queue().Len()) }, func() float64 { return float64(queue().Panics() + watch.SinkPanics()) })
	m.SetShard(opts.Shard)
	return m
}

// reset forgets everything a Run learnt: a Run after another (the merger
// paused while the scanner beside it was not ready) starts afresh from the
// final reports.
func (m *Merger) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queue = watch.NewQueue("tally-merge")
	m.listed = map[schema.GroupVersionResource]bool{}
	m.sources = nil
	m.states = map[string]*resourceState{}
	m.strings = map[string]string{}
	m.metas = map[string]*resultMeta{}
	m.internLive = 0
	m.kinds = nil
	m.allListed = make(chan struct{})
	m.policies = map[string]PolicyInfo{}
	m.policyKinds = map[string]schema.GroupVersionResource{}
	m.written = map[string]report.Written{}
	m.writing = map[string]*inflight{}
	m.seeds = nil
	m.folds = map[string]*fold{}
	m.unadopted = map[string]unadopted{}
}

// watched are the kinds always watched; the admission kinds and the CEL
// policy kinds are watched where served (Run).
var watched = append(catalog.GVRs(nil, catalog.Classic),
	apiresources.BackgroundScanReport, apiresources.ClusterBackgroundScanReport)

// servedKinds returns those of gvrs the API server serves and the merger
// may read: a list answered NotFound (no CRD) or Forbidden (RBAC without
// the group) leaves the kind out, with a log line, so that the rest is
// merged all the same (the CEL policy kinds; Kyverno's EphemeralReports
// where Kyverno is older). A kind that cannot be listed for another reason
// is watched: its watch retries with backoff.
func (m *Merger) servedKinds(ctx context.Context, gvrs ...schema.GroupVersionResource) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, gvr := range gvrs {
		_, err := m.client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
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
	defer m.queue.ShutDown()
	if m.opts.RESTConfig != nil {
		raw, err := watch.NewRawClient(m.opts.RESTConfig, m.opts.ReportAPI.GroupVersion())
		if err != nil {
			return fmt.Errorf("final report client: %w", err)
		}
		m.out.Raw = raw
	}
	if err := m.seed(ctx); err != nil {
		return fmt.Errorf("read existing policy reports: %w", err)
	}
	// Beside Kyverno 1.13+ no AdmissionReport kind is served: tally writes
	// none there, and Kyverno's EphemeralReports are read instead.
	policyKinds := catalog.GVRs(nil, catalog.CEL, catalog.AdmissionPolicy)
	kinds := append(slices.Clone(watched), m.servedKinds(ctx, append([]schema.GroupVersionResource{apiresources.AdmissionReport, apiresources.ClusterAdmissionReport}, policyKinds...)...)...)
	if m.opts.Ingest {
		kinds = append(kinds, m.servedKinds(ctx, ephemeralKinds...)...)
		kinds = append(kinds, m.servedKyvernoOnlyKinds(ctx)...)
	}
	m.mu.Lock()
	m.kinds = kinds
	if m.opts.Metadata != nil {
		owned := &finalReports{m: m, listed: map[schema.GroupVersionResource]bool{}}
		namespaced, cluster := m.opts.ReportAPI.FinalGVRs()
		for _, gvr := range []schema.GroupVersionResource{namespaced, cluster} {
			m.sources = append(m.sources, watch.StartMetadata(ctx, m.opts.Metadata, gvr, report.LabelManagedBy+"="+m.opts.ManagedBy, owned))
		}
	}
	for _, gvr := range kinds {
		client := m.client
		if gvr == apiresources.BackgroundScanReport || gvr == apiresources.ClusterBackgroundScanReport {
			client = m.opts.Background
		}
		m.sources = append(m.sources, watch.Start(ctx, client, gvr, m))
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for range m.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-m.allListed:
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
		m.collectOrphans(ctx)
	}()
	<-ctx.Done()
	m.queue.ShutDown()
	for _, s := range m.sources {
		s.Stop()
	}
	wg.Wait()
	return nil
}

// Synced reports whether every watched kind was listed and the queue is empty.
func (m *Merger) Synced() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.watchedKinds() {
		if !m.listed[g] {
			return false
		}
	}
	return m.queue.Idle()
}

func (m *Merger) processNext(ctx context.Context) bool {
	return m.queue.ProcessNext(ctx, "merge", m.reconcile)
}

// reconcile writes the final report of one resource if it differs from what
// was written, and deletes it when no result remains.
func (m *Merger) reconcile(ctx context.Context, uid string) error {
	if isAdoptKey(uid) {
		return m.adopt(ctx, uid)
	}
	m.mu.Lock()
	var v *verification
	if st := m.states[uid]; st != nil {
		v = admissionVerification(st)
	}
	m.mu.Unlock()
	if v != nil {
		if err := m.verify(ctx, uid, v); err != nil {
			var notYet *notYetError
			if errors.As(err, &notYet) {
				// Nothing merged, nothing deleted: the report waits for
				// its resource (verify.go).
				m.queue.AddAfter(uid, notYet.after)
				return nil
			}
			if !unverifiable(err) {
				return err // retried with backoff
			}
			logr.FromContextOrDiscard(ctx).Info("admission results cannot be tied to the resource's content; used as they are", "uid", uid, "error", err.Error())
			m.mu.Lock()
			if st := m.states[uid]; st != nil && st.admission.present && admissionKey(&st.admission) == v.hash {
				st.admission.checkedHash, st.admission.unverifiable = v.hash, true
			}
			m.mu.Unlock()
		}
	}
	m.mu.Lock()
	st := m.states[uid]
	in := Input{Policies: m.policies, Filter: m.opts.Filter}
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
		admission, boundTo, withheld = m.admissionResults(st)
		in.Admission, in.Background = expand(admission), expand(st.background.results)
		// The background results describe the content the admission
		// results that count were computed for (or none count).
		in.BackgroundCurrent = st.background.present && (len(admission) == 0 || st.background.hash == boundTo)
	}
	prev, hadReport := m.written[uid]
	m.mu.Unlock()

	var results []wgv1alpha2.PolicyReportResult
	if st != nil {
		results = Merge(in)
	}
	// done deletes the AdmissionReport merged, now that the final report
	// holds what counts of it (merged.go).
	done := func() error {
		return m.afterMerge(ctx, uid, merged, retained, withheld, updated, chosenFrom(results, in.Admission))
	}
	if len(results) == 0 {
		if !hadReport {
			return done()
		}
		gvr := m.opts.ReportAPI.FinalGVR(prev.Namespace)
		err := m.client.Resource(gvr).Namespace(prev.Namespace).Delete(ctx, uid, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete final report %s/%s: %w", prev.Namespace, uid, err)
		}
		m.metrics.writes.WithLabelValues("delete").Inc()
		m.mu.Lock()
		delete(m.written, uid)
		m.mu.Unlock()
		return done()
	}
	final, body, digest, err := finalBody(m.opts.ReportAPI, subject, results, m.opts.ManagedBy)
	if err != nil {
		return fmt.Errorf("render final report of %s: %w", uid, err)
	}
	if hadReport && prev.Digest == digest {
		return done()
	}
	if !hadReport {
		// Deleted by someone else: written again only while its resource
		// exists (owned.go).
		if ok, err := m.recreateAllowed(ctx, uid); err != nil || !ok {
			return err
		}
	}
	gvr := m.opts.ReportAPI.FinalGVR(subject.Namespace)
	name := final.Metadata.Name
	m.startWrite(uid)
	rv, err := m.writeFinal(ctx, gvr, &final, body, hadReport)
	if err != nil {
		m.endWrite(uid)
		if reason := watch.Refused(err); reason != "" {
			// Refused for good (namespace gone or terminating, invalid,
			// forbidden, kind not served): retrying the same write cannot
			// succeed. It is tried again when the resource's reports change.
			logr.FromContextOrDiscard(ctx).Error(err, "final report write refused; dropped", "namespace", subject.Namespace, "name", name, "reason", reason)
			m.metrics.dropped.WithLabelValues(reason).Inc()
			return nil
		}
		return fmt.Errorf("write final report %s/%s: %w", subject.Namespace, name, err)
	}
	op := "update"
	if !hadReport {
		op = "create"
	}
	m.metrics.writes.WithLabelValues(op).Inc()
	m.mu.Lock()
	m.written[uid] = report.Written{Namespace: subject.Namespace, Digest: digest, ResourceVersion: rv}
	m.mu.Unlock()
	if others := m.endWrite(uid); others {
		// The watch showed another version while it was written: someone
		// else's write, or the merger's own seen before its answer.
		if err := m.checkWritten(ctx, gvr, subject.Namespace, uid, rv); err != nil {
			return err
		}
	}
	return done()
}

const seedPageSize = 100

// seed reads the final reports already written, so that unchanged ones are
// not written again after a restart or failover.
func (m *Merger) seed(ctx context.Context) error {
	selector := report.LabelManagedBy + "=" + m.opts.ManagedBy
	namespaced, cluster := m.opts.ReportAPI.FinalGVRs()
	// Small pages: a final report with its managedFields decodes to tens of
	// KiB, and only its digest is kept.
	opts := metav1.ListOptions{LabelSelector: selector, Limit: seedPageSize}
	for _, gvr := range []schema.GroupVersionResource{namespaced, cluster} {
		err := watch.ListByNamespace(ctx, m.client, gvr, gvr == namespaced, opts, m.owns, func(items []unstructured.Unstructured) error {
			for i := range items {
				if !m.owns(items[i].GetNamespace()) {
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
		m.mu.Lock()
		m.written[u.GetName()] = report.Written{Namespace: u.GetNamespace()}
		m.mu.Unlock()
		m.metrics.putRight.WithLabelValues("read-back-refused").Inc()
		return
	}
	s := report.Subject{APIVersion: r.Scope.APIVersion, Kind: r.Scope.Kind, Namespace: r.Scope.Namespace, Name: r.Scope.Name, UID: r.Scope.UID}
	_, _, d, err := finalBody(m.opts.ReportAPI, s, r.Results, m.opts.ManagedBy)
	if err != nil {
		return
	}
	// A time in the future would win every merge: clamped.
	now := metav1.Timestamp{Seconds: m.opts.Now().Unix()}
	for j := range r.Results {
		if after(r.Results[j].Timestamp, now) {
			r.Results[j].Timestamp = now
		}
	}
	m.mu.Lock()
	m.written[r.Name] = report.Written{Namespace: r.Namespace, Digest: d, ResourceVersion: u.GetResourceVersion()}
	// Admission results live on in the final report once their
	// AdmissionReport is deleted: read back (seedAdmission, once the
	// policies are listed).
	m.keepSeed(&r, s)
	m.mu.Unlock()
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
		return (m.opts.LegacySeeds || len(m.opts.Key) == 0) && lastWriter(u, fieldManager)
	}
	s := report.Subject{APIVersion: r.Scope.APIVersion, Kind: r.Scope.Kind, Namespace: r.Scope.Namespace, Name: r.Scope.Name, UID: r.Scope.UID}
	_, body, _, err := finalBody(m.opts.ReportAPI, s, r.Results, m.opts.ManagedBy)
	return err == nil && validSignature(m.opts.Key, body, sig)
}

// watchedKinds are the kinds watched (before Run: the classic ones). The
// caller holds m.mu.
func (m *Merger) watchedKinds() []schema.GroupVersionResource {
	if m.kinds == nil {
		return watched
	}
	return m.kinds
}

// policyInfo reads what the merge needs of a policy, autogen rules
// included; key is its key in Input.Policies (PolicyKey).
func policyInfo(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (string, PolicyInfo, error) {
	k, ok := catalog.KindOf(gvr)
	if !ok {
		return "", PolicyInfo{}, fmt.Errorf("%s is not a policy kind", gvr.String())
	}
	switch k.Family {
	case catalog.KyvernoOnly:
		key, info := kyvernoOnlyInfo(gvr, u)
		return key, info, nil
	case catalog.CEL:
		return celPolicyInfo(k, gvr, u)
	case catalog.AdmissionPolicy:
		key, _ := policyKeyOf(gvr, u)
		return key, PolicyInfo{
			Background: true,
			AnyRule:    true,
			// An unlabelled ValidatingAdmissionPolicy is not reported (its
			// results, from before the label went, are dropped).
			ReportsDisabled: !k.Reported(u.GetLabels()),
			Scored:          u.GetAnnotations()[engine.AnnotationScored] != "false",
			Category:        u.GetAnnotations()[engine.AnnotationCategory],
			Severity:        u.GetAnnotations()[engine.AnnotationSeverity],
		}, nil
	}
	// Compiled for its rules' names, autogen rules included.
	p, err := catalog.Read(gvr, u)
	if err != nil {
		return "", PolicyInfo{}, err
	}
	compiled, spec := p.Compiled, p.Spec
	info := PolicyInfo{
		Background:      spec.BackgroundEnabled(),
		Admission:       spec.AdmissionEnabled(),
		Rules:           map[string]bool{},
		ReportsDisabled: report.ReportingDisabled(u.GetLabels()),
		Scored:          compiled.Scored,
		Category:        compiled.Category,
		Severity:        compiled.Severity,
	}
	for _, r := range compiled.Rules {
		info.Rules[r.Name] = true
		if r.VerifiesImages() {
			if info.OtherHandler == nil {
				info.OtherHandler = map[string]bool{}
			}
			info.OtherHandler[r.Name] = true
		}
	}
	for _, r := range compiled.LeftOut {
		if info.KyvernoOnly == nil {
			info.KyvernoOnly = map[string]bool{}
		}
		for _, name := range []string{r.Name, "autogen-" + r.Name, "autogen-cronjob-" + r.Name} {
			info.KyvernoOnly[name] = true
		}
	}
	return compiled.Name, info, nil
}

// celPolicyInfo reads what the merge needs of a ValidatingPolicy,
// MutatingPolicy or their namespaced kinds: their results have no rule to
// check.
func celPolicyInfo(k *catalog.Kind, gvr schema.GroupVersionResource, u *unstructured.Unstructured) (string, PolicyInfo, error) {
	info := PolicyInfo{
		AnyRule:         true,
		ReportsDisabled: report.ReportingDisabled(u.GetLabels()),
		Scored:          u.GetAnnotations()[engine.AnnotationScored] != "false",
		Category:        u.GetAnnotations()[engine.AnnotationCategory],
		Severity:        u.GetAnnotations()[engine.AnnotationSeverity],
	}
	var err error
	if info.Background, info.Admission, err = k.Modes(u); err != nil {
		return "", PolicyInfo{}, err
	}
	key, _ := policyKeyOf(gvr, u)
	return key, info, nil
}
