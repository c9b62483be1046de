package merge

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

func TestCompactKeepsWhatTheMergeNeeds(t *testing.T) {
	m := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{Registry: prometheus.NewRegistry()})
	entry := func(rule string, r wgv1alpha2.Result, msg string, props map[string]string) wgv1alpha2.PolicyReportResult {
		return wgv1alpha2.PolicyReportResult{Source: "kyverno", Policy: "p", Rule: rule, Category: "c", Severity: "high",
			Result: r, Scored: true, Message: msg, Properties: props, Timestamp: metav1.Timestamp{Seconds: 10, Nanos: 5}}
	}
	in := []wgv1alpha2.PolicyReportResult{
		entry("a", pass, "validation rule 'a' passed.", map[string]string{"process": "background scan"}),
		entry("b", fail, "validation error: x", map[string]string{"process": "background scan", "exceptions": "e1"}),
		entry("c", skip, "", nil),
	}
	withResources := append([]wgv1alpha2.PolicyReportResult(nil), in...)
	withResources[2].Resources = []corev1.ObjectReference{{Kind: "Pod", Name: "x"}}
	m.st.mu.Lock()
	c1 := m.st.compact(withResources)
	c2 := m.st.compact([]wgv1alpha2.PolicyReportResult{entry("a", fail, "validation error: y", map[string]string{"process": "background scan"})})
	m.st.mu.Unlock()
	if got := expand(c1); !reflect.DeepEqual(got, in) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", got, in)
	}
	if c1[0].meta != c2[0].meta {
		t.Error("entries of the same rule do not share their metadata")
	}
	if c1[0].meta == c1[1].meta {
		t.Error("entries of different rules share metadata")
	}
}

const skip = wgv1alpha2.ResultSkip

func TestInternedValuesOfGoneReportsAreReleased(t *testing.T) {
	m := New(dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{Registry: prometheus.NewRegistry()})
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	// 50,000 generations of one resource's report, each by a new policy with
	// a new message: what a day of policy churn leaves behind.
	for i := range 50000 {
		st := &resourceState{}
		st.background.present = true
		st.background.results = m.st.compact([]wgv1alpha2.PolicyReportResult{{
			Source: "kyverno", Policy: fmt.Sprintf("policy-%d", i), Rule: "r", Result: fail, Message: fmt.Sprintf("message %d", i),
		}})
		m.st.states["uid"] = st
	}
	if n := len(m.st.strings) + len(m.st.metas); n > 2*internSlack+100 {
		t.Errorf("the intern tables hold %d entries for one live result: unused ones are never released", n)
	}
	got := expand(m.st.states["uid"].background.results)
	if got[0].Policy != "policy-49999" || got[0].Message != "message 49999" {
		t.Errorf("live result changed: %+v", got[0])
	}
	// What is live stays shared with new copies.
	again := m.st.compact([]wgv1alpha2.PolicyReportResult{{Source: "kyverno", Policy: "policy-49999", Rule: "r", Result: fail, Message: "message 49999"}})
	if again[0].meta != m.st.states["uid"].background.results[0].meta {
		t.Error("the live metadata is no longer shared")
	}
}
