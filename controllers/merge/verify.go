package merge

import (
	"context"
	"errors"
	"fmt"
	"time"

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
//
// An admission report may be read before its resource is persisted: Kyverno
// 1.19's ValidatingPolicy handler creates its EphemeralReport before it
// answers the API server, and a report of an UPDATE may come before the
// update is stored. A GET that finds no resource of that name, or finds it
// without any content a hashed section names, is then no answer yet: the
// check is made again with backoff (recheckDelay) while the report is
// younger than OrphanGrace, and nothing is merged or deleted meanwhile. Only
// past OrphanGrace, or when the name holds an object of another UID (ours
// was never stored, or is gone: UIDs are never reused), are the results
// taken as those of content the resource does not have.

// verifier checks that an admission report's results are of its
// resource's current content before they count (verify.go).
type verifier struct {
	*state
	cl *cluster
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
	return &verification{hash: admissionKey(a), owner: subjectRef(st)}
}

// verify reads the resource and records whether v.hash is its content. It
// returns a *notYetError when the content may still come (see above).
func (m *verifier) verify(ctx context.Context, uid string, v *verification) error {
	current, missing, err := m.currentHash(ctx, uid, v.owner)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.states[uid]
	if st == nil || !st.admission.present || admissionKey(&st.admission) != v.hash {
		return nil // changed meanwhile: checked again as it is now
	}
	a := &st.admission
	if m.awaitContent(st, current, missing) {
		a.rechecks++
		m.metrics.rechecks.Inc()
		return &notYetError{after: recheckDelay(a.rechecks)}
	}
	a.checkedHash, a.contentHash, a.rechecks = v.hash, current, 0
	return nil
}

// notYetError says that the resource an admission report names does not
// exist yet, or not with the content the report was computed on: the check
// is made again after the delay.
type notYetError struct{ after time.Duration }

func (e *notYetError) Error() string {
	return fmt.Sprintf("the resource does not have the admitted content yet; checked again in %s", e.after)
}

// Backoff of the checks of content not there yet: 250 ms, doubled at each
// try, at most 8 s (a report written before its resource is persisted is
// found at the first or second try).
const (
	recheckFirst = 250 * time.Millisecond
	recheckMax   = 8 * time.Second
)

// recheckDelay is the wait before the n-th check again (n >= 1).
func recheckDelay(n int) time.Duration {
	d := recheckFirst
	for i := 1; i < n && d < recheckMax; i++ {
		d *= 2
	}
	return min(d, recheckMax)
}

// awaitContent says whether what the GET found (current: the content hash,
// "" when no object of the report's resource is there; missing: no object
// of that name at all) may still change into what the admission part names:
// while its report is younger than OrphanGrace, a resource not found may
// not be stored yet, and one without the content of any hashed section may
// not have its admitted update stored yet. Callers hold m.mu.
func (m *verifier) awaitContent(st *resourceState, current string, missing bool) bool {
	if m.opts.Now().Sub(st.updated) >= m.opts.OrphanGrace {
		return false
	}
	if missing {
		return true
	}
	if current == "" {
		return false // another object of that name: ours is gone, or was never stored
	}
	if st.admission.lastGoodHash == current {
		return false // content whose results counted before
	}
	hashed := false
	for _, s := range st.admission.sections {
		switch s.hash {
		case current:
			return false
		case "", seededHash:
		default:
			hashed = true
		}
	}
	return hashed
}

// currentHash is the content hash of the resource now: "" when it does not
// exist, with missing set when no object of its name exists at all (rather
// than one of another UID).
func (m *verifier) currentHash(ctx context.Context, uid string, o ownerRef) (hash string, missing bool, err error) {
	gvr, namespaced, err := m.cl.ownerGVR(o)
	if err != nil {
		return "", false, fmt.Errorf("verify admission results of %s: %w: %w", uid, errCannotLocate, err)
	}
	ns := ""
	if namespaced {
		ns = o.namespace
	}
	obj, err := m.client.Resource(gvr).Namespace(ns).Get(ctx, o.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", true, nil
	case err != nil:
		return "", false, fmt.Errorf("verify admission results of %s: get %s %s/%s: %w", uid, gvr, ns, o.name, err)
	case obj.GetUID() != types.UID(uid):
		return "", false, nil // deleted and created again: another resource
	}
	h, err := report.AdmissionHash(obj.Object)
	if err != nil {
		return "", false, fmt.Errorf("verify admission results of %s: %w", uid, err)
	}
	return report.HashText(h), false, nil
}

// errCannotLocate: the resource's type cannot be told from the report.
var errCannotLocate = errors.New("the resource's type cannot be told")

// contentUnreadable says whether a verification error means the content can
// never be read (its type cannot be told or is not served, or the merger
// may not read it): the admission results are then used as they are,
// rather than never.
func contentUnreadable(err error) bool {
	return apierrors.IsForbidden(err) || meta.IsNoMatchError(err) || errors.Is(err, errCannotLocate)
}

// admissionResults are the admission results that count now (see above),
// compact, and the hash of the content they are bound to ("" for results
// that carry none), and whether a section newer than those that count was
// withheld: one the scan may still catch up with (a section older than the
// one that counts is the history of earlier content, which never counts
// again). It remembers the last results that counted. Callers hold m.mu.
func (m *verifier) admissionResults(st *resourceState) ([]compactResult, string, bool) {
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
