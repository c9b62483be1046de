package merge

import (
	"context"
	"encoding/json"
	"hash/fnv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

// applyReport is the server-side apply body of a final report: the fields of
// report.Final's object, marshalled straight from Go values (no unstructured
// round trip) and without the empty creationTimestamp a metav1.ObjectMeta
// would add.
type applyReport struct {
	APIVersion string                          `json:"apiVersion"`
	Kind       string                          `json:"kind"`
	Metadata   applyMeta                       `json:"metadata"`
	Scope      *corev1.ObjectReference         `json:"scope,omitempty"`
	Summary    wgv1alpha2.PolicyReportSummary  `json:"summary"`
	Results    []wgv1alpha2.PolicyReportResult `json:"results,omitempty"`
}

type applyMeta struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace,omitempty"`
	Labels          map[string]string       `json:"labels,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// finalBody renders the final report of a subject, labelled
// app.kubernetes.io/managed-by=managedBy, and its digest (what the merger
// compares to decide whether to write).
func finalBody(api report.API, s report.Subject, results []wgv1alpha2.PolicyReportResult, managedBy string) (r applyReport, body []byte, digest uint64, err error) {
	polr, cpolr := report.Final(s, results)
	if polr != nil {
		r = applyReport{APIVersion: polr.APIVersion, Kind: polr.Kind, Metadata: metaOf(polr.ObjectMeta), Scope: polr.Scope, Summary: polr.Summary, Results: polr.Results}
	} else {
		r = applyReport{APIVersion: cpolr.APIVersion, Kind: cpolr.Kind, Metadata: metaOf(cpolr.ObjectMeta), Scope: cpolr.Scope, Summary: cpolr.Summary, Results: cpolr.Results}
	}
	r.APIVersion, r.Kind = api.TypeMeta(s.Namespace)
	r.Metadata.Labels[report.LabelManagedBy] = managedBy
	body, err = json.Marshal(&r)
	if err != nil {
		return r, nil, 0, err
	}
	h := fnv.New64a()
	_, _ = h.Write(body) // a hash.Hash's Write never returns an error
	return r, body, h.Sum64(), nil
}

func metaOf(m metav1.ObjectMeta) applyMeta {
	return applyMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, OwnerReferences: m.OwnerReferences}
}

// writeFinal writes a final report: created when the merger has not
// written it (body is the whole object), else its content replaced by a JSON
// patch of the fields the merger owns. Both cost the API server far less
// than server-side apply, which computes field ownership on every write; a
// report created behind the merger's back is patched, one deleted behind it
// created again.
func (m *Merger) writeFinal(ctx context.Context, gvr schema.GroupVersionResource, r *applyReport, body []byte, exists bool) error {
	namespace := r.Metadata.Namespace
	if !exists {
		err := m.create(ctx, gvr, namespace, body)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	err := m.patch(ctx, gvr, r)
	if apierrors.IsNotFound(err) {
		return m.create(ctx, gvr, namespace, body)
	}
	return err
}

func (m *Merger) create(ctx context.Context, gvr schema.GroupVersionResource, namespace string, body []byte) error {
	if m.raw != nil {
		return m.raw.Post().NamespaceIfScoped(namespace, namespace != "").Resource(gvr.Resource).
			Param("fieldManager", fieldManager).Body(body).Do(ctx).Error()
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return err
	}
	_, err := m.client.Resource(gvr).Namespace(namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: fieldManager})
	return err
}

// patch replaces the fields the merger owns ("add" replaces a member that
// exists, RFC 6902, and works when it does not).
func (m *Merger) patch(ctx context.Context, gvr schema.GroupVersionResource, r *applyReport) error {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{
		{"add", "/metadata/labels", r.Metadata.Labels},
		{"add", "/summary", r.Summary},
		{"add", "/results", r.Results},
	}
	if r.Metadata.OwnerReferences != nil {
		ops = append(ops, op{"add", "/metadata/ownerReferences", r.Metadata.OwnerReferences})
	}
	if r.Scope != nil {
		ops = append(ops, op{"add", "/scope", r.Scope})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	namespace, name := r.Metadata.Namespace, r.Metadata.Name
	if m.raw != nil {
		return m.raw.Patch(types.JSONPatchType).NamespaceIfScoped(namespace, namespace != "").Resource(gvr.Resource).Name(name).
			Param("fieldManager", fieldManager).Body(data).Do(ctx).Error()
	}
	_, err = m.client.Resource(gvr).Namespace(namespace).Patch(ctx, name, types.JSONPatchType, data, metav1.PatchOptions{FieldManager: fieldManager})
	return err
}
