package merge

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// finalWriter writes the final reports (final.go), puts right those
// someone else changed (owned.go), and deletes the intermediate reports
// merged (merged.go).
type finalWriter struct {
	*state
	cl  *cluster
	out watch.Writer // Merger.Run sets out.Raw when Options.RESTConfig is
}

// applyReport is the body of a final report as the merger creates it (and
// the values its JSON patches set): the fields of report.Final's object,
// marshalled straight from Go values (no unstructured round trip) and
// without the empty creationTimestamp a metav1.ObjectMeta would add.
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
	Annotations     map[string]string       `json:"annotations,omitempty"`
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

// writeFinal writes a final report (watch.Writer): created when the merger
// has not written it (body is the whole object), else the fields the merger
// owns replaced by a JSON patch; either way signed with the merger's key
// (AnnotationSignature over body). It returns the report's resourceVersion.
func (m *finalWriter) writeFinal(ctx context.Context, gvr schema.GroupVersionResource, r *applyReport, body []byte, exists bool) (string, error) {
	var annotations map[string]string
	if len(m.opts.Key) > 0 {
		annotations = map[string]string{AnnotationSignature: signature(m.opts.Key, body)}
	}
	ops := []watch.PatchOp{
		watch.Set("/metadata/labels", r.Metadata.Labels),
		watch.Set("/summary", r.Summary),
		watch.Set("/results", r.Results),
	}
	if annotations != nil {
		ops = append(ops, watch.Set("/metadata/annotations", annotations))
	}
	if r.Metadata.OwnerReferences != nil {
		ops = append(ops, watch.Set("/metadata/ownerReferences", r.Metadata.OwnerReferences))
	}
	if r.Scope != nil {
		ops = append(ops, watch.Set("/scope", r.Scope))
	}
	whole := func() ([]byte, error) {
		if annotations == nil {
			return body, nil
		}
		signed := *r
		signed.Metadata.Annotations = annotations
		return json.Marshal(&signed)
	}
	rv, _, err := m.out.Write(ctx, gvr, r.Metadata.Namespace, r.Metadata.Name, exists, whole, ops)
	return rv, err
}

// AnnotationSignature holds the merger's signature of a final report's
// content: an HMAC-SHA256, with the merger's key (a Secret of tally's
// namespace), of the report as the merger renders it without the
// annotation. A report read back at start-up counts as the merger's only
// when it verifies (R48): nobody without the key can write one that does.
const AnnotationSignature = "tally.dev/signature"

// signature is the signature of a rendered report.
func signature(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	_, _ = mac.Write(body) // a hash.Hash's Write never returns an error
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// validSignature says whether sig signs body with key (no key: never).
func validSignature(key, body []byte, sig string) bool {
	if len(key) == 0 {
		return false
	}
	want, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	_, _ = mac.Write(body)
	return hmac.Equal(mac.Sum(nil), want)
}
