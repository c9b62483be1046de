package report

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

func TestChangedAtRoundTrips(t *testing.T) {
	a := metav1.Timestamp{Seconds: 1795577752, Nanos: 596752795}
	b := metav1.Timestamp{Seconds: 1795577800}
	c := metav1.Timestamp{Seconds: 1795577800, Nanos: 7}
	tests := []struct {
		times []metav1.Timestamp
		want  string
	}{
		{nil, ""},
		{[]metav1.Timestamp{a}, "1795577752.596752795"},
		{[]metav1.Timestamp{a, a, a, a}, "1795577752.596752795"},
		{[]metav1.Timestamp{a, a, b, b, a}, "1795577752.596752795,,1795577800,,1795577752.596752795"},
		{[]metav1.Timestamp{b, c, c}, "1795577800,1795577800.000000007"},
	}
	for _, tt := range tests {
		got := EncodeChangedAt(tt.times)
		if got != tt.want {
			t.Errorf("EncodeChangedAt(%v) = %q, want %q", tt.times, got, tt.want)
		}
		results := make([]wgv1alpha2.PolicyReportResult, len(tt.times))
		if err := FillChangedAt(results, got); err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if r.Timestamp != tt.times[i] {
				t.Errorf("%q: entry %d got %v, want %v", got, i, r.Timestamp, tt.times[i])
			}
		}
	}
}

// An entry that carries its own timestamp (a report of an earlier release)
// keeps it; the others take the annotation's.
func TestChangedAtFillsOnlyEntriesWithoutATimestamp(t *testing.T) {
	own := metav1.Timestamp{Seconds: 5}
	results := []wgv1alpha2.PolicyReportResult{{Timestamp: own}, {}}
	if err := FillChangedAt(results, "10"); err != nil {
		t.Fatal(err)
	}
	if results[0].Timestamp != own || results[1].Timestamp.Seconds != 10 {
		t.Errorf("got %v, %v", results[0].Timestamp, results[1].Timestamp)
	}
}

func TestChangedAtMalformedNamesTheElement(t *testing.T) {
	for _, v := range []string{"10,x", "10,11.5", "10,11.abcdefghi", "10,11.-00000001"} {
		err := FillChangedAt(make([]wgv1alpha2.PolicyReportResult, 3), v)
		if err == nil || !strings.Contains(err.Error(), "element 1") || !strings.Contains(err.Error(), AnnotationChangedAt) {
			t.Errorf("%q: error %v, want one naming element 1 of the annotation", v, err)
		}
	}
}
