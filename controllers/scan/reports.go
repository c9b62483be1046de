package scan

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/memstore"
	"github.com/tally-dev/tally/report"
)

// reportWriter hands one BackgroundScanReport per resource to the merger
// (handover.Hub), only when its content changed. It remembers the digest
// of what it last handed over per resource UID.
type reportWriter struct {
	client  dynamic.Interface // reads the final reports at start-up (seed)
	hub     *handover.Hub
	metrics *metrics
	final   FinalReports
	// shard, when set, is the namespaces this replica scans
	// (Options.Shard): only their final reports are seeded.
	shard func(namespace string) bool

	mu      sync.Mutex
	written map[string]report.Written
}

func newReportWriter(client dynamic.Interface, hub *handover.Hub, m *metrics, final FinalReports, shard func(namespace string) bool) *reportWriter {
	return &reportWriter{client: client, hub: hub, metrics: m, final: final, shard: shard, written: map[string]report.Written{}}
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
		w.remove(res.UID)
		return nil
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
	hash := report.HashText(labelHash)
	digest := digestOf(apiVersion, res.Kind, res.Name, res.UID, res.Namespace, hash, results)
	w.mu.Lock()
	prev, ok := w.written[res.UID]
	w.mu.Unlock()
	if ok && prev.Digest == digest {
		return nil
	}
	entries := make([]wgv1alpha2.PolicyReportResult, 0, len(results))
	for _, r := range results {
		entries = append(entries, reportResult(r))
	}
	report.Sort(entries)
	spec, changedAt := backgroundSpecOf(metav1.OwnerReference{APIVersion: apiVersion, Kind: res.Kind, Name: res.Name, UID: types.UID(res.UID)}, entries)
	annotations := map[string]string{report.AnnotationChangedAt: changedAt}
	// The entries go as one string (report.AnnotationResults), which the
	// merger reads without decoding each entry into a map; results too
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
	err = w.hub.Put(&handover.Report{
		APIVersion: kyvernov2.GroupVersion.String(), Kind: kind,
		Metadata: handover.Meta{Name: res.UID, Namespace: res.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: res.Kind, Name: res.Name, UID: types.UID(res.UID)}}},
		Spec: specJSON,
	})
	if err != nil {
		return err
	}
	op := "update"
	if !ok || prev.Digest == 0 {
		op = "create"
	}
	w.metrics.reportWrites.WithLabelValues(op).Inc()
	w.mu.Lock()
	w.written[res.UID] = report.Written{Namespace: res.Namespace, Digest: digest}
	w.mu.Unlock()
	return nil
}

// remove withdraws the report of a resource, if one was handed over.
func (w *reportWriter) remove(uid string) {
	w.mu.Lock()
	prev, ok := w.written[uid]
	delete(w.written, uid)
	w.mu.Unlock()
	if !ok {
		return
	}
	w.hub.Delete(prev.Namespace, uid)
	w.metrics.reportWrites.WithLabelValues("delete").Inc()
}

// FinalReports name the final reports the merger beside the scanner
// writes: the scanner reads its results back from them after a restart.
type FinalReports struct {
	API       report.API
	ManagedBy string
}

// seed reads the background results of the final reports written before a
// restart, so that results keep the time they last changed (and the merger
// writes nothing for a resource whose results did not change), and a
// result that was failing is not told again as a new violation. It hands
// the results to keep, by resource UID, one page of reports at a time (a
// shard taken over at 50,000 Pods held 25,000 reports' decoded results at
// once, 3x the memory of its first scan), and returns how many reports it
// read them from; their resources are checked once every kind is listed
// (sweepOrphans). keep may be given a report again when the seed is tried
// again. The namespaced reports are read namespace by namespace, of the
// shard's namespaces (watch.ListByNamespace).
func (w *reportWriter) seed(ctx context.Context, keep func(map[string][]wgv1alpha2.PolicyReportResult) error) (int, error) {
	n := 0
	api, managedBy := cmp.Or(w.final.API, report.APIWGPolicy), cmp.Or(w.final.ManagedBy, report.ManagedBy)
	namespaced, cluster := api.FinalGVRs()
	opts := metav1.ListOptions{LabelSelector: report.LabelManagedBy + "=" + managedBy, Limit: watch.ListPageSize}
	for _, gvr := range []schema.GroupVersionResource{namespaced, cluster} {
		err := watch.ListByNamespace(ctx, w.client, gvr, gvr == namespaced, opts, w.shard, func(items []unstructured.Unstructured) error {
			page := map[string][]wgv1alpha2.PolicyReportResult{}
			for i := range items {
				if w.shard != nil && !w.shard(items[i].GetNamespace()) {
					continue // another replica's shard
				}
				var r wgv1alpha2.PolicyReport
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(items[i].Object, &r); err != nil {
					continue // not ours to repair: the merger rewrites it from the scan
				}
				var results []wgv1alpha2.PolicyReportResult
				for _, e := range r.Results {
					if e.Properties[report.PropertyProcess] != report.ProcessBackground {
						continue // an admission result: the merger keeps it
					}
					if e.Result == wgv1alpha2.ResultWarn && !e.Scored {
						e.Result = wgv1alpha2.ResultFail // the merger turned it to warn (R24); the scan says fail
					}
					results = append(results, e)
				}
				if len(results) == 0 {
					continue
				}
				page[r.Name] = results
				// Known, so that sweepOrphans finds those of resources gone;
				// digest 0 is no content: the first scan hands it over.
				w.written[r.Name] = report.Written{Namespace: r.Namespace}
			}
			if err := keep(page); err != nil {
				return err
			}
			n += len(page)
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
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
