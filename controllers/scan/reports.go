package scan

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/go-logr/logr"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// Labels of intermediate reports, as Kyverno set them, so that existing
// tooling recognises them.
const (
	fieldManager = "tally-scanner"
)

// reportWriter writes one BackgroundScanReport per resource, only when its
// content changed. It remembers the digest of what it last wrote (or found
// at start-up) per resource UID.
//
// A write the API server refuses for good (the namespace is gone or
// terminating, the report is invalid, the write is forbidden, the kind is
// not served: watch.Refused) is dropped: logged once with the reason and
// counted, and the same content is not written again before retryRefused
// has passed (the next periodic scan): a rescan, a retry of the queue or an
// unrelated event does not repeat it. A change of the content is written at
// once. Other failures are returned, and retried by the queue with its
// exponential backoff.
type reportWriter struct {
	client  dynamic.Interface
	out     watch.Writer // Run sets out.Raw
	metrics *metrics
	clock   clock.PassiveClock
	// retryRefused is how long a refused content is not written again.
	retryRefused time.Duration

	mu      sync.Mutex
	written map[string]writtenReport
	refused map[string]refusedReport
}

// refusedReport is a content whose write was refused, and when it may be
// tried again.
type refusedReport struct {
	digest  uint64
	retryAt time.Time
}

type writtenReport struct {
	namespace string
	digest    uint64
}

func newReportWriter(client dynamic.Interface, m *metrics, clk clock.PassiveClock, retryRefused time.Duration) *reportWriter {
	return &reportWriter{client: client, out: watch.Writer{Client: client, FieldManager: fieldManager}, metrics: m, clock: clk, retryRefused: retryRefused,
		written: map[string]writtenReport{}, refused: map[string]refusedReport{}}
}

func reportGVR(namespace string) schema.GroupVersionResource {
	if namespace == "" {
		return apiresources.ClusterBackgroundScanReport
	}
	return apiresources.BackgroundScanReport
}

// digestSeed keys the report digests of this process (they are compared
// within it only).
var digestSeed = maphash.MakeSeed()

// digestOf hashes what tally writes of a report: its owner, the resource
// hash label (the merger compares it with the admission report's) and the
// results (each entry and when it changed; the order does not matter). It
// costs no encoding: an unchanged report, the common case of every
// periodic scan, is recognised without building it.
func digestOf(apiVersion, kind, name, uid, namespace, resourceHash string, results []memstore.Result) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	for _, s := range []string{apiVersion, kind, name, uid, namespace, resourceHash} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	var sum uint64
	for _, r := range results {
		sum += maphash.Comparable(digestSeed, r)
	}
	return h.Sum64() ^ sum*0x9e3779b97f4a7c15 ^ uint64(len(results))
}

// ensure makes the report of res hold exactly results (nil/empty: no report).
func (w *reportWriter) ensure(ctx context.Context, res *memstore.Resource, gvr schema.GroupVersionResource, results []memstore.Result) error {
	if len(results) == 0 {
		return w.remove(ctx, res.UID)
	}
	apiVersion := res.Version
	if res.Group != "" {
		apiVersion = res.Group + "/" + res.Version
	}
	// The label is the hash admission results are bound to: the merger
	// counts the admission section of that content.
	labelHash := res.Hash
	if res.AdmissionHash != 0 {
		labelHash = res.AdmissionHash
	}
	hash := fmt.Sprintf("%x", labelHash)
	digest := digestOf(apiVersion, res.Kind, res.Name, res.UID, res.Namespace, hash, results)
	w.mu.Lock()
	prev, ok := w.written[res.UID]
	refused, wasRefused := w.refused[res.UID]
	w.mu.Unlock()
	if ok && prev.digest == digest {
		return nil
	}
	if wasRefused && refused.digest == digest && w.clock.Now().Before(refused.retryAt) {
		return nil // refused for good a moment ago: not retried hot
	}
	entries := make([]wgv1alpha2.PolicyReportResult, 0, len(results))
	for _, r := range results {
		entries = append(entries, reportResult(r))
	}
	report.Sort(entries)
	spec, changedAt := backgroundSpecOf(metav1.OwnerReference{APIVersion: apiVersion, Kind: res.Kind, Name: res.Name, UID: types.UID(res.UID)}, entries)
	annotations := map[string]string{report.AnnotationChangedAt: changedAt}
	// The entries go as one string (report.AnnotationResults), which the
	// API server neither decodes nor validates field by field; results too
	// large for an annotation stay in spec.results.
	packed, fits, err := report.PackResults(spec.Results)
	if err != nil {
		return fmt.Errorf("encode results of %s: %w", res.UID, err)
	}
	if fits {
		annotations[report.AnnotationResults] = packed
		spec.Results = nil
	}
	specJSON, err := json.Marshal(&spec)
	if err != nil {
		return fmt.Errorf("encode report of %s: %w", res.UID, err)
	}
	kind := "BackgroundScanReport"
	if res.Namespace == "" {
		kind = "ClusterBackgroundScanReport"
	}
	labels := map[string]string{
		report.LabelManagedBy:    report.ManagedBy,
		report.LabelResourceUID:  res.UID,
		report.LabelResourceHash: hash,
	}
	report.ResourceTypeLabels(labels, gvr, res.Kind)
	rgvr := reportGVR(res.Namespace)
	// A report tally has not seen is created; one it knows is replaced by a
	// JSON patch (spec, labels and annotations: the whole spec goes, so
	// nothing of the previous results survives).
	created, err := w.out.Write(ctx, rgvr, res.Namespace, res.UID, ok, func() ([]byte, error) {
		return json.Marshal(reportBody{
			APIVersion: kyvernov2.GroupVersion.String(), Kind: kind,
			Metadata: reportMeta{Name: res.UID, Namespace: res.Namespace, Labels: labels, Annotations: annotations,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: res.Kind, Name: res.Name, UID: types.UID(res.UID)}}},
			Spec: specJSON,
		})
	}, []watch.PatchOp{watch.Set("/spec", json.RawMessage(specJSON)), watch.Set("/metadata/labels", labels), watch.Set("/metadata/annotations", annotations)})
	op := "update"
	if created {
		op = "create"
	}
	if err != nil {
		if reason := watch.Refused(err); reason != "" {
			w.refuse(ctx, kind, res.Namespace, res.UID, digest, reason, err)
			return nil
		}
		return fmt.Errorf("write %s %s/%s: %w", kind, res.Namespace, res.UID, err)
	}
	w.metrics.reportWrites.WithLabelValues(op).Inc()
	w.mu.Lock()
	w.written[res.UID] = writtenReport{namespace: res.Namespace, digest: digest}
	delete(w.refused, res.UID)
	w.mu.Unlock()
	return nil
}

// refuse drops a write the API server refused for good: one log line with
// the reason, the metric, and no retry of the same content before
// retryRefused.
func (w *reportWriter) refuse(ctx context.Context, kind, namespace, uid string, digest uint64, reason string, err error) {
	logr.FromContextOrDiscard(ctx).Error(err, "background report write refused; dropped until its content changes or the next periodic scan",
		"kind", kind, "namespace", namespace, "uid", uid, "reason", reason)
	w.metrics.reportsDropped.WithLabelValues(reason).Inc()
	w.mu.Lock()
	w.refused[uid] = refusedReport{digest: digest, retryAt: w.clock.Now().Add(w.retryRefused)}
	w.mu.Unlock()
}

// reportBody is a report as written: encoded from typed values, the spec
// already encoded (for its digest), never through unstructured maps.
type reportBody struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   reportMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
}

type reportMeta struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace,omitempty"`
	Labels          map[string]string       `json:"labels"`
	Annotations     map[string]string       `json:"annotations,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
}

// remove deletes the report of a resource, if one was written or found.
func (w *reportWriter) remove(ctx context.Context, uid string) error {
	w.mu.Lock()
	prev, ok := w.written[uid]
	delete(w.refused, uid)
	w.mu.Unlock()
	if !ok {
		return nil
	}
	err := w.client.Resource(reportGVR(prev.namespace)).Namespace(prev.namespace).Delete(ctx, uid, metav1.DeleteOptions{})
	switch reason := watch.Refused(err); {
	case err == nil, apierrors.IsNotFound(err):
	case reason != "":
		// Forbidden: retrying cannot help. The report is forgotten (its
		// ownerReference lets the garbage collector delete it).
		logr.FromContextOrDiscard(ctx).Error(err, "background report delete refused; dropped",
			"namespace", prev.namespace, "uid", uid, "reason", reason)
		w.metrics.reportsDropped.WithLabelValues(reason).Inc()
		w.mu.Lock()
		delete(w.written, uid)
		w.mu.Unlock()
		return nil
	default:
		return fmt.Errorf("delete report %s/%s: %w", prev.namespace, uid, err)
	}
	w.metrics.reportWrites.WithLabelValues("delete").Inc()
	w.mu.Lock()
	delete(w.written, uid)
	w.mu.Unlock()
	return nil
}

// seed reads the reports written before a restart: their digests (so an
// unchanged report is not written again) and their results (so results keep
// the time they last changed). It returns the results by resource UID.
func (w *reportWriter) seed(ctx context.Context) (map[string][]wgv1alpha2.PolicyReportResult, error) {
	out := map[string][]wgv1alpha2.PolicyReportResult{}
	selector := report.LabelManagedBy + "=" + report.ManagedBy
	for _, gvr := range []schema.GroupVersionResource{apiresources.BackgroundScanReport, apiresources.ClusterBackgroundScanReport} {
		opts := metav1.ListOptions{LabelSelector: selector, Limit: watch.ListPageSize}
		for {
			list, err := w.client.Resource(gvr).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
			}
			for i := range list.Items {
				var r kyvernov2.BackgroundScanReport
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &r); err != nil {
					continue // not ours to repair: it is rewritten when its resource is scanned
				}
				results, err := report.IntermediateResults(r.Spec.Results, r.Annotations)
				if err != nil {
					continue // not ours to repair: it is rewritten when its resource is scanned
				}
				stored := make([]memstore.Result, len(results))
				for i, e := range results {
					stored[i] = storedResult(slim(e))
				}
				o := r.Spec.Owner
				d := digestOf(o.APIVersion, o.Kind, o.Name, r.Name, r.Namespace, r.Labels[report.LabelResourceHash], stored)
				w.written[r.Name] = writtenReport{namespace: r.Namespace, digest: d}
				out[r.Name] = results
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	return out, nil
}

// known lists the UIDs that have a report.
func (w *reportWriter) known() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.written))
	for uid := range w.written {
		out = append(out, uid)
	}
	return out
}
