package admission

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	reportsv1 "github.com/tally-dev/tally/api/reports/v1"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// GVRs of the reports a Kyverno admission controller writes beside tally.
var (
	GVREphemeralReport        = reportsv1.GroupVersion.WithResource("ephemeralreports")
	GVRClusterEphemeralReport = reportsv1.GroupVersion.WithResource("clusterephemeralreports")
)

// ingester folds the admission reports of a Kyverno admission controller
// (kyverno.io AdmissionReports of 1.10-1.12, one per request with random
// names; reports.kyverno.io EphemeralReports of later releases) into tally's
// per-resource AdmissionReports, then deletes them. It is a watch.Sink.
type ingester struct{ rec *recorder }

var _ watch.Sink = (*ingester)(nil)

func (in *ingester) Upsert(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if e := foreignEntry(gvr, u); e != nil {
		in.rec.add(e)
	}
}

func (in *ingester) Remove(schema.GroupVersionResource, *unstructured.Unstructured) {}

func (in *ingester) Replace(gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	for _, u := range objs {
		in.Upsert(gvr, u)
	}
}

func (in *ingester) Listed(schema.GroupVersionResource) {}

// foreignEntry reads a Kyverno admission report as a batch of results to
// fold (nil: not one to ingest).
func foreignEntry(gvr schema.GroupVersionResource, u *unstructured.Unstructured) *entry {
	labels := u.GetLabels()
	if labels[report.LabelManagedBy] == report.ManagedBy || u.GetDeletionTimestamp() != nil {
		return nil // tally's own report, or one going away
	}
	if (gvr == GVREphemeralReport || gvr == GVRClusterEphemeralReport) && labels[report.LabelSource] != "" && labels[report.LabelSource] != "admission" {
		return nil // a background-scan ephemeral report: not admission output
	}
	var r kyvernov2.AdmissionReport // every kind read here has this shape
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		return nil
	}
	owner := r.Spec.Owner
	if owner.UID == "" && len(r.OwnerReferences) > 0 {
		owner = r.OwnerReferences[0]
	}
	uid := labels[report.LabelResourceUID]
	if uid == "" {
		uid = string(owner.UID)
	}
	if uid == "" {
		return nil
	}
	owner.Controller, owner.BlockOwnerDeletion = nil, nil
	at := u.GetCreationTimestamp().Time
	for _, res := range r.Spec.Results {
		if t := time.Unix(res.Timestamp.Seconds, int64(res.Timestamp.Nanos)); t.After(at) {
			at = t
		}
	}
	e := &entry{
		uid: uid, namespace: u.GetNamespace(), owner: owner,
		gvr: labels[report.LabelResourceGVR], hash: labels[report.LabelResourceHash], at: at,
		policyLabels: map[string]string{},
		results:      r.Spec.Results,
		sources:      []sourceRef{{gvr: gvr, namespace: u.GetNamespace(), name: u.GetName(), uid: string(u.GetUID())}},
	}
	for k, v := range labels {
		if strings.HasPrefix(k, "cpol.kyverno.io/") || strings.HasPrefix(k, "pol.kyverno.io/") {
			e.policyLabels[k] = v
		}
	}
	return e
}
