package report

import (
	"strings"
	"testing"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// Packed entries follow spec.results and take their times, like the
// entries of spec.results, from the changed-at annotation in that order.
func TestIntermediateResultsReadSpecThenPackedEntries(t *testing.T) {
	spec := []wgv1alpha2.PolicyReportResult{{Policy: "a", Rule: "r", Result: "pass"}}
	got, err := IntermediateResults(spec, map[string]string{
		AnnotationResults:   `[{"source":"kyverno","policy":"b","rule":"r","result":"fail","message":"no","properties":{"control":"x"}},{"policy":"c","rule":"r","result":"pass"}]`,
		AnnotationChangedAt: "10,20.000000005",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Policy != "a" || got[1].Policy != "b" || got[2].Policy != "c" {
		t.Fatalf("results %+v, want a, b, c", got)
	}
	if got[1].Message != "no" || got[1].Result != "fail" || got[1].Source != "kyverno" || got[1].Properties["control"] != "x" {
		t.Errorf("packed entry read as %+v", got[1])
	}
	if got[0].Timestamp.Seconds != 10 || got[1].Timestamp.Seconds != 20 || got[1].Timestamp.Nanos != 5 || got[2].Timestamp.Seconds != 20 {
		t.Errorf("times %v %v %v", got[0].Timestamp, got[1].Timestamp, got[2].Timestamp)
	}
	// No annotation: spec.results alone, as earlier releases wrote them.
	if got, err := IntermediateResults(spec, nil); err != nil || len(got) != 1 {
		t.Errorf("without annotations: %v, %v", got, err)
	}
}

func TestIntermediateResultsMalformedPackingIsAnErrorNamingIt(t *testing.T) {
	spec := []wgv1alpha2.PolicyReportResult{{Policy: "a", Rule: "r", Result: "pass"}}
	got, err := IntermediateResults(spec, map[string]string{AnnotationResults: `[{"policy":`})
	if err == nil || !strings.Contains(err.Error(), AnnotationResults) {
		t.Fatalf("error %v, want one naming %s", err, AnnotationResults)
	}
	if len(got) != 1 || got[0].Policy != "a" {
		t.Errorf("the entries of spec.results were lost: %+v", got)
	}
}

// What PackResults writes, IntermediateResults reads back; results past
// MaxPackedResults are not packed.
func TestPackResultsRoundTrips(t *testing.T) {
	in := []wgv1alpha2.PolicyReportResult{{Policy: "p", Rule: "r", Result: "fail", Message: "m", Source: "kyverno"}}
	packed, fits, err := PackResults(in)
	if err != nil || !fits {
		t.Fatalf("PackResults: %v, fits %v", err, fits)
	}
	got, err := IntermediateResults(nil, map[string]string{AnnotationResults: packed, AnnotationChangedAt: "10"})
	if err != nil || len(got) != 1 || got[0].Policy != "p" || got[0].Message != "m" || got[0].Timestamp.Seconds != 10 {
		t.Fatalf("read back %+v, %v", got, err)
	}
	big := []wgv1alpha2.PolicyReportResult{{Message: strings.Repeat("x", MaxPackedResults)}}
	if _, fits, err := PackResults(big); err != nil || fits {
		t.Errorf("%d bytes of message: fits %v, %v; want not packed", MaxPackedResults, fits, err)
	}
}
