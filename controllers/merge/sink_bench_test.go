package merge

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/api/apiresources"
)

// BenchmarkUpsertAdmissionReport records the AdmissionReport of a Pod under
// the 17 Pod Security Standards policies (19 results of one content), as
// the merger does for every report its watch delivers.
//
//	go test -run '^$' -bench BenchmarkUpsertAdmissionReport -cpu 1 ./controllers/merge/
func BenchmarkUpsertAdmissionReport(b *testing.B) {
	results := make([]any, 0, 19)
	for i := range 19 {
		results = append(results, map[string]any{
			"policy": fmt.Sprintf("disallow-thing-%02d", i), "rule": "r", "result": "pass", "message": "validation rule 'r' passed.",
			"properties": map[string]any{"process": "admission review"},
			"timestamp":  map[string]any{"seconds": int64(100 + i), "nanos": int64(0)},
		})
	}
	report := intermediate("AdmissionReport", "0123456789abcdef", pass, 100)
	if err := unstructured.SetNestedSlice(report.Object, results, "spec", "results"); err != nil {
		b.Fatal(err)
	}
	m := New(nil, Options{Registry: prometheus.NewRegistry()})
	b.ReportAllocs()
	for b.Loop() {
		m.in.Upsert(context.Background(), apiresources.AdmissionReport, report)
	}
	if st := m.st.states["u1"]; st == nil || len(st.admission.results) != 19 {
		b.Fatal("the report's results were not recorded")
	}
}
