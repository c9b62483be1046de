package merge

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tally-dev/tally/api/apiresources"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
	"github.com/tally-dev/tally/report"
)

func podObject(team string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "app", "namespace": "ns", "uid": "u1", "labels": map[string]any{"team": team}},
	}}
}

func hashOf(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	h, err := report.ContentHash(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h)
}

func intermediate(kind, hash string, result wgv1alpha2.Result, sec int64) *unstructured.Unstructured {
	labels := map[string]any{report.LabelResourceUID: "u1", report.LabelResourceGVR: "configmaps.v1"}
	if hash != "" {
		labels[report.LabelResourceHash] = hash
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kyverno.io/v2", "kind": kind,
		"metadata": map[string]any{"name": "u1", "namespace": "ns", "labels": labels},
		"spec": map[string]any{
			"owner":   map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "app", "uid": "u1"},
			"results": []any{map[string]any{"policy": "p", "rule": "r", "result": string(result), "timestamp": map[string]any{"seconds": sec, "nanos": int64(0)}}},
		},
	}}
}

// withSections adds to an admission report a result of another content
// hash (a section of its own).
func withSections(u *unstructured.Unstructured, hash string, result wgv1alpha2.Result, sec int64) *unstructured.Unstructured {
	results, _, _ := unstructured.NestedSlice(u.Object, "spec", "results")
	results = append(results, map[string]any{"policy": "p", "rule": "r", "result": string(result),
		"properties": map[string]any{report.PropertyResourceHash: hash}, "timestamp": map[string]any{"seconds": sec, "nanos": int64(0)}})
	_ = unstructured.SetNestedSlice(u.Object, results, "spec", "results") // a slice of JSON values always sets
	return u
}

func TestAdmissionResultsCountOnlyForTheCurrentContent(t *testing.T) {
	stored := podObject("a")      // what the API server holds
	forged := podObject("forged") // what a forged review claims
	current, other := hashOf(t, stored), hashOf(t, forged)
	tests := map[string]struct {
		background  *unstructured.Unstructured
		admission   *unstructured.Unstructured
		earlier     *unstructured.Unstructured // an admission report that counted before
		gone        bool                       // the resource no longer exists
		wantResults string
	}{
		"a forged review (another content, newer) does not replace the background fail": {
			background: intermediate("BackgroundScanReport", current, fail, 10),
			admission:  intermediate("AdmissionReport", other, pass, 20), wantResults: "p/r=fail",
		},
		"an admission result of the current content counts (newer wins)": {
			background: intermediate("BackgroundScanReport", current, fail, 10),
			admission:  intermediate("AdmissionReport", current, pass, 20), wantResults: "p/r=pass",
		},
		"without a background report the resource is read: its content matches": {
			admission: intermediate("AdmissionReport", current, pass, 20), wantResults: "p/r=pass",
		},
		"without a background report the resource is read: a forged content does not count": {
			admission: intermediate("AdmissionReport", other, pass, 20), wantResults: "",
		},
		"a forged review does not hide what counted before for the current content": {
			earlier:   intermediate("AdmissionReport", current, fail, 10),
			admission: intermediate("AdmissionReport", other, pass, 20), wantResults: "p/r=fail",
		},
		"a new merger counts the genuine section of a report a forged review added to (failover)": {
			admission: withSections(intermediate("AdmissionReport", other, pass, 20), current, fail, 10), wantResults: "p/r=fail",
		},
		"a new merger counts the genuine section beside a background report": {
			background: intermediate("BackgroundScanReport", current, pass, 5),
			admission:  withSections(intermediate("AdmissionReport", other, pass, 20), current, fail, 10), wantResults: "p/r=fail",
		},
		"a forged section of a resource without background report withholds nothing genuine": {
			admission: withSections(intermediate("AdmissionReport", current, fail, 10), other, pass, 20), wantResults: "p/r=fail",
		},
		"an ingested Kyverno result has no hash and counts as it is": {
			background: intermediate("BackgroundScanReport", current, fail, 10),
			admission:  intermediate("AdmissionReport", "", pass, 20), wantResults: "p/r=pass",
		},
		"an ingested Kyverno result of a resource that exists counts": {
			admission: intermediate("AdmissionReport", "", pass, 20), wantResults: "p/r=pass",
		},
		"an ingested Kyverno result of a resource that is gone is never merged": {
			admission: intermediate("AdmissionReport", "", pass, 20), gone: true, wantResults: "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var objs []runtime.Object
			if !tc.gone {
				objs = append(objs, stored.DeepCopy())
			}
			client := dynfake.NewSimpleDynamicClient(runtime.NewScheme(), objs...)
			now := time.Unix(1000, 0)
			m := New(client, Options{Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }})
			m.st.policies = map[string]PolicyInfo{"p": {Background: true, Admission: true, Rules: map[string]bool{"r": true}, Scored: true}}
			if tc.background != nil {
				m.in.Upsert(context.Background(), apiresources.BackgroundScanReport, tc.background)
			}
			merge := func() string {
				m.st.mu.Lock()
				v := admissionVerification(m.st.states["u1"])
				m.st.mu.Unlock()
				if v != nil {
					err := m.ver.verify(context.Background(), "u1", v)
					var notYet *notYetError
					if errors.As(err, &notYet) {
						// The verdict once the resource had its time
						// to be stored (TestAdmissionReportsWaitForTheirResource).
						now = now.Add(m.st.opts.OrphanGrace)
						err = m.ver.verify(context.Background(), "u1", v)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				m.st.mu.Lock()
				defer m.st.mu.Unlock()
				st := m.st.states["u1"]
				admission, boundTo, _ := m.ver.admissionResults(st)
				out := Merge(Input{Policies: m.st.policies, Admission: expand(admission), Background: expand(st.background.results),
					BackgroundCurrent: st.background.present && (len(admission) == 0 || st.background.hash == boundTo)})
				s := ""
				for _, r := range out {
					s += r.Policy + "/" + r.Rule + "=" + string(r.Result)
					if _, ok := r.Properties[report.PropertyResourceHash]; ok {
						t.Errorf("a final result carries %s", report.PropertyResourceHash)
					}
				}
				return s
			}
			if tc.earlier != nil {
				m.in.Upsert(context.Background(), apiresources.AdmissionReport, tc.earlier)
				merge()
			}
			m.in.Upsert(context.Background(), apiresources.AdmissionReport, tc.admission)
			if got := merge(); got != tc.wantResults {
				t.Errorf("final results = %q, want %q", got, tc.wantResults)
			}
		})
	}
}

// A final report write the API server refuses for good is dropped with a
// metric, not returned for a hot retry; a transient failure is returned.
func TestRefusedFinalReportWritesAreDropped(t *testing.T) {
	tests := map[string]struct {
		err     error
		dropped bool
	}{
		"the namespace is terminating": {&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}}}}, true},
		"the report is invalid":     {apierrors.NewInvalid(schema.GroupKind{Group: "wgpolicyk8s.io", Kind: "PolicyReport"}, "u1", nil), true},
		"the API server is unready": {apierrors.NewServiceUnavailable("etcd"), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
			for _, verb := range []string{"create", "patch"} {
				client.PrependReactor(verb, "policyreports", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			}
			m := New(client, Options{Registry: prometheus.NewRegistry()})
			m.st.policies = map[string]PolicyInfo{"p": {Background: true, Admission: true, Rules: map[string]bool{"r": true}, Scored: true}}
			m.in.Upsert(context.Background(), apiresources.BackgroundScanReport, intermediate("BackgroundScanReport", "h", fail, 10))
			err := m.reconcile(context.Background(), "u1")
			if tc.dropped {
				if err != nil {
					t.Errorf("reconcile = %v: a refused write is not retried", err)
				}
				if got := testutil.ToFloat64(m.st.metrics.dropped); got != 1 {
					t.Errorf("dropped = %v, want 1", got)
				}
			} else if err == nil {
				t.Error("a transient failure was not returned for a retry")
			}
			if _, ok := m.st.written["u1"]; ok {
				t.Error("a write that failed is remembered as written")
			}
		})
	}
}
