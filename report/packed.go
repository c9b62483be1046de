package report

import (
	"encoding/json"
	"fmt"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// AnnotationResults holds, on a BackgroundScanReport written by tally, its
// results: one JSON array of entries, in place of spec.results. To the API
// server a report's results are then one string: it decodes, coerces,
// validates and keeps in its watch cache a map for every entry of
// spec.results, which made the entries three quarters of the CPU and of the
// heap a BackgroundScanReport costs it (hack/writecost).
//
// The entries are those spec.results would hold (the merger's input only:
// no timestamp, which AnnotationChangedAt gives, and nothing the merger
// derives). Readers take spec.results followed by the packed entries, so a
// report of an earlier release, or of another writer, reads as before.
const AnnotationResults = "reports.tally.dev/results"

// MaxPackedResults is the largest AnnotationResults a writer packs: the
// API server allows 256 KiB of annotations to an object, and a report whose
// results take more is written with spec.results entries instead.
const MaxPackedResults = 128 << 10

// PackResults returns a report's entries (of the type its writer gives
// spec.results) as the value of AnnotationResults, and false when they take
// more than MaxPackedResults: they are then written as spec.results.
func PackResults[E any](results []E) (string, bool, error) {
	packed, err := json.Marshal(results)
	if err != nil {
		return "", false, fmt.Errorf("annotation %s: %w", AnnotationResults, err)
	}
	if len(packed) > MaxPackedResults {
		return "", false, nil
	}
	return string(packed), true, nil
}

// IntermediateResults returns the results of an intermediate report: the
// entries of its spec.results followed by those packed in AnnotationResults,
// each without a timestamp of its own given its time from
// AnnotationChangedAt. A malformed annotation is an error naming it; the
// results read up to it are returned with it.
func IntermediateResults(results []wgv1alpha2.PolicyReportResult, annotations map[string]string) ([]wgv1alpha2.PolicyReportResult, error) {
	if packed := annotations[AnnotationResults]; packed != "" {
		var more []wgv1alpha2.PolicyReportResult
		if err := json.Unmarshal([]byte(packed), &more); err != nil {
			return results, fmt.Errorf("annotation %s: %w", AnnotationResults, err)
		}
		results = append(results, more...)
	}
	return results, FillChangedAt(results, annotations[AnnotationChangedAt])
}
