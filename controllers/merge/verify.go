package merge

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tally-dev/tally/report"
)

// Admission results bound to content.
//
// An AdmissionReport holds a section of results per content hash of the
// objects the webhook admitted (report.PropertyResourceHash; results
// written before sections are bound to the report's hash label,
// audit.kyverno.io/resource.hash). A section counts only while the
// resource's current content has its hash: a review forged with a real
// object's UID and made-up content (anyone who reaches the webhook's Service
// without a client certificate can send one), or a request that was
// admitted and then failed to persist, never changes a final report, and
// never removes the section of the content the resource has (the admission
// bridge drops a section only once it is stale: controllers/admission's
// sections.go).
//
// The current hash is the BackgroundScanReport's when the resource has one
// (the scanner rewrites it whenever the content changes); otherwise the
// merger reads the resource once per new set of sections and hashes it
// with the same function. Until the background report catches up with a
// legitimate change, the results last verified for the content the
// resource then still had are used. Admission results without a hash (a
// Kyverno admission controller's, ingested beside Kyverno) cannot be bound
// to content: they count while the resource exists (checked the same way
// when it has no background report), so a report naming a resource that is
// gone is never merged into a final report.

// unhashed is the key an admission report without hashed sections is
// checked under.
const unhashed = "(no hash)"

// admissionKey is what an admission report's check is keyed by: the
// hashes of its sections.
func admissionKey(a *reportPart) string {
	var key strings.Builder
	for _, s := range a.sections {
		if s.hash == "" {
			continue
		}
		if key.Len() > 0 {
			key.WriteByte(',')
		}
		key.WriteString(s.hash)
	}
	if key.Len() == 0 {
		return unhashed
	}
	return key.String()
}

// Reasons admission results are withheld (the metric's label).
const (
	withheldContentDiffers = "content-differs"
)

// verification is a GET the merger must make to learn whether an admission
// hash is the resource's current content.
type verification struct {
	hash  string
	owner ownerRef
}

// admissionVerification returns the GET a state needs, if any. Callers hold m.mu.
func admissionVerification(st *resourceState) *verification {
	a := &st.admission
	if !a.present || st.background.present || a.checkedHash == admissionKey(a) {
		return nil
	}
	return &verification{hash: admissionKey(a), owner: ownerRef{
		gvrLabel: a.ref.gvrLabel, apiVersion: st.subject.APIVersion, kind: st.subject.Kind,
		namespace: st.subject.Namespace, name: st.subject.Name,
	}}
}

// verify reads the resource and records whether v.hash is its content.
func (m *Merger) verify(ctx context.Context, uid string, v *verification) error {
	current, err := m.currentHash(ctx, uid, v.owner)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.states[uid]; st != nil && st.admission.present && admissionKey(&st.admission) == v.hash {
		st.admission.checkedHash, st.admission.contentHash = v.hash, current
	}
	return nil
}

// currentHash is the content hash of the resource now ("" when it no longer
// exists: no admission result of it counts).
func (m *Merger) currentHash(ctx context.Context, uid string, o ownerRef) (string, error) {
	gvr, namespaced, err := m.ownerGVR(o)
	if err != nil {
		return "", fmt.Errorf("verify admission results of %s: %w: %w", uid, errCannotLocate, err)
	}
	ns := ""
	if namespaced {
		ns = o.namespace
	}
	obj, err := m.client.Resource(gvr).Namespace(ns).Get(ctx, o.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("verify admission results of %s: get %s %s/%s: %w", uid, gvr, ns, o.name, err)
	case obj.GetUID() != types.UID(uid):
		return "", nil // deleted and created again: another resource
	}
	h, err := report.AdmissionHash(obj.Object)
	if err != nil {
		return "", fmt.Errorf("verify admission results of %s: %w", uid, err)
	}
	return fmt.Sprintf("%x", h), nil
}

// errCannotLocate: the resource's type cannot be told from the report.
var errCannotLocate = errors.New("the resource's type cannot be told")

// unverifiable says whether a verification error means the content can
// never be read (its type cannot be told or is not served, or the merger
// may not read it): the admission results are then used as they are,
// rather than never.
func unverifiable(err error) bool {
	return apierrors.IsForbidden(err) || meta.IsNoMatchError(err) || errors.Is(err, errCannotLocate)
}

// admissionResults are the admission results that count now (see above),
// compact, and the hash of the content they are bound to ("" for results
// that carry none), and whether a section newer than those that count was
// withheld: one the scan may still catch up with (a section older than the
// one that counts is the history of earlier content, which never counts
// again). It remembers the last results that counted. Callers hold m.mu.
func (m *Merger) admissionResults(st *resourceState) ([]compactResult, string, bool) {
	a := &st.admission
	if !a.present || len(a.sections) == 0 {
		return nil, "", false
	}
	if a.unverifiable { // the newest section, as it is
		return a.sections[0].results, a.sections[0].hash, false
	}
	verified := a.checkedHash == admissionKey(a)
	current := ""
	switch {
	case st.background.present:
		current = st.background.hash
	case verified:
		current = a.contentHash
	}
	exists := st.background.present || (verified && a.contentHash != "")
	var out []compactResult
	counted, withheld, pending := "", false, false
	for _, s := range a.sections { // newest first
		switch {
		case s.hash == "":
			if exists {
				out = append(out, s.results...)
			}
		case s.hash == seededHash:
			// Read back from the final report (merged.go): verified before
			// it was written, they count for the content the resource has,
			// unless a newer section counts.
			if exists && counted == "" {
				out = append(out, s.results...)
				if current != "" {
					counted = current
					a.lastGood, a.lastGoodHash = s.results, current
				}
			}
		case current != "" && s.hash == current:
			out = append(out, s.results...)
			counted = s.hash
			a.lastGood, a.lastGoodHash = s.results, s.hash
		default:
			withheld = true
			pending = pending || counted == ""
		}
	}
	if withheld {
		m.metrics.withheld.WithLabelValues(withheldContentDiffers).Inc()
	}
	if counted == "" && current != "" && a.lastGoodHash == current {
		out = append(out, a.lastGood...)
		counted = current
	}
	return out, counted, pending
}
