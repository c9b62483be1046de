package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// Ingester folds the admission reports of a Kyverno admission controller
// running beside tally into tally's per-resource AdmissionReports (through
// a Recorder), then deletes them: kyverno.io AdmissionReports of Kyverno
// 1.10-1.12 (one per request, random names, spec.owner set) and
// reports.kyverno.io EphemeralReports and ClusterEphemeralReports of later
// releases (spec.owner empty: the resource is named by the audit.kyverno.io
// labels and annotations). It needs no webhook of tally's own.
//
// A report that names no whole resource (no UID, kind, version or name) is
// not folded into anything: it is deleted, with a log line and a metric.
type Ingester struct {
	client dynamic.Interface
	disc   discovery.DiscoveryInterface
	rec    *Recorder
}

var _ watch.Sink = (*Ingester)(nil)

// NewIngester builds an Ingester writing through rec; Run reads.
func NewIngester(client dynamic.Interface, disc discovery.DiscoveryInterface, rec *Recorder) *Ingester {
	return &Ingester{client: client, disc: disc, rec: rec}
}

// Run watches every kind of Kyverno admission report the API server serves
// until ctx ends. The Recorder is run by its owner.
func (in *Ingester) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("ingest")
	ctx = logr.NewContext(ctx, log)
	kinds := served(ctx, in.disc, apiresources.AdmissionReport, apiresources.ClusterAdmissionReport, apiresources.EphemeralReport, apiresources.ClusterEphemeralReport)
	log.Info("ingesting Kyverno admission reports", "kinds", fmt.Sprint(kinds))
	sources := make([]*watch.Source, 0, len(kinds))
	for _, gvr := range kinds {
		sources = append(sources, watch.Start(ctx, in.client, gvr, in))
	}
	<-ctx.Done()
	for _, s := range sources {
		s.Cancel()
	}
	for _, s := range sources {
		<-s.Done()
	}
	return nil
}

// Upsert folds one report.
func (in *Ingester) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	e, ok := foreignEntry(gvr, u)
	if e == nil {
		return
	}
	if ok {
		in.rec.add(e)
		return
	}
	logr.FromContextOrDiscard(ctx).Info("Kyverno admission report names no resource; deleted without folding it",
		"kind", gvr.Resource, "namespace", u.GetNamespace(), "name", u.GetName())
	in.rec.metrics.dropped.WithLabelValues(dropNoResource).Inc()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	in.rec.deleteSources(ctx, e.sources, false)
}

// Remove: a deleted report has nothing left to fold.
func (in *Ingester) Remove(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) {
}

// Replace folds every listed report.
func (in *Ingester) Replace(ctx context.Context, gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	for _, u := range objs {
		in.Upsert(ctx, gvr, u)
	}
}

// Listed: nothing waits for the first list.
func (in *Ingester) Listed(context.Context, schema.GroupVersionResource) {}

// foreignEntry reads a Kyverno admission report as a batch of results to
// fold. It returns nil for a report not to ingest (tally's own, one going
// away, a background-scan ephemeral report, an unreadable one), and ok false
// with the report as the entry's only source when it names no resource.
func foreignEntry(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (e *entry, ok bool) {
	labels := u.GetLabels()
	if labels[report.LabelManagedBy] == report.ManagedBy || u.GetDeletionTimestamp() != nil {
		return nil, false // tally's own report, or one going away
	}
	if (gvr == apiresources.EphemeralReport || gvr == apiresources.ClusterEphemeralReport) && labels[report.LabelSource] != "" && labels[report.LabelSource] != "admission" {
		return nil, false // a background-scan ephemeral report: not admission output
	}
	var r kyvernov2.AdmissionReport // every kind read here has this shape
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		return nil, false
	}
	src := sourceRef{gvr: gvr, namespace: u.GetNamespace(), name: u.GetName(), uid: string(u.GetUID())}
	owner, namespace, named := report.ReportOwner(u, r.Spec.Owner)
	if !named || namespace != u.GetNamespace() {
		// A report describes a resource of its own namespace: one naming
		// another is not written anywhere else.
		return &entry{sources: []sourceRef{src}}, false
	}
	at := u.GetCreationTimestamp().Time
	for _, res := range r.Spec.Results {
		if t := time.Unix(res.Timestamp.Seconds, int64(res.Timestamp.Nanos)); t.After(at) {
			at = t
		}
	}
	gvrOf, _, _ := report.ResourceGVR(labels)
	e = &entry{
		uid: string(owner.UID), namespace: namespace, owner: owner,
		gvr: gvrOf, hash: labels[report.LabelResourceHash], at: at,
		policyLabels: map[string]string{},
		results:      r.Spec.Results,
		sources:      []sourceRef{src},
	}
	for k, v := range labels {
		if strings.HasPrefix(k, "cpol.kyverno.io/") || strings.HasPrefix(k, "pol.kyverno.io/") {
			e.policyLabels[k] = v
		}
	}
	return e, true
}

// served reports which of gvrs the API server serves. A group version it
// does not serve (not found) is simply left out; any other discovery error
// (the API server unreachable, an aggregated API down) is retried with
// backoff until ctx ends, so that a kind is not left unwatched for the life
// of the process because of a moment's outage at its start.
func served(ctx context.Context, disc discovery.DiscoveryInterface, gvrs ...schema.GroupVersionResource) []schema.GroupVersionResource {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
	for {
		out, err := servedOnce(disc, gvrs...)
		if err == nil || ctx.Err() != nil {
			return out
		}
		logr.FromContextOrDiscard(ctx).Error(err, "discovery failed; retrying")
		if c, ok := disc.(discovery.CachedDiscoveryInterface); ok {
			c.Invalidate()
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(backoff.Step()):
		}
	}
}

// servedOnce is one pass of served; the error joins the discovery errors
// other than not found.
func servedOnce(disc discovery.DiscoveryInterface, gvrs ...schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	var errs []error
	for _, gvr := range gvrs {
		list, err := disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if apierrors.IsNotFound(err) || errors.Is(err, memory.ErrCacheNotFound) {
			continue // not served (a cached discovery says so with its own error)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", gvr.GroupVersion(), err))
			continue
		}
		for _, r := range list.APIResources {
			if r.Name == gvr.Resource {
				out = append(out, gvr)
				break
			}
		}
	}
	return out, errors.Join(errs...)
}

// deleteSources deletes ingested reports: once their results are written
// (folded, counted as ingested), or when they can never be (no resource,
// namespace gone).
func (r *Recorder) deleteSources(ctx context.Context, sources []sourceRef, folded bool) {
	log := logr.FromContextOrDiscard(ctx)
	for _, s := range sources {
		opts := metav1.DeleteOptions{}
		if s.uid != "" {
			uid := types.UID(s.uid)
			opts.Preconditions = &metav1.Preconditions{UID: &uid}
		}
		err := r.client.Resource(s.gvr).Namespace(s.namespace).Delete(ctx, s.name, opts)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Error(err, "deleting an ingested Kyverno report failed", "name", s.namespace+"/"+s.name)
			continue
		}
		if folded {
			r.metrics.ingested.WithLabelValues(s.gvr.Resource).Inc()
		}
	}
}
