package report

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// AnnotationChangedAt holds, on a BackgroundScanReport written by tally, when
// each of its results last changed, in the order of spec.results. The
// entries themselves carry no timestamp: a timestamp is an object of two
// fields in every entry, which the API server decodes, validates and keeps in
// its watch cache as a map of its own (a third of a report's memory there);
// one annotation is a single string.
//
// The value is a comma-separated list of Unix times, "seconds.nanoseconds"
// (nanoseconds in nine digits, or none when zero). Element i is the time of
// entry i; an empty or missing element repeats the one before it, so the
// common report, whose results all changed at once, is a single time.
const AnnotationChangedAt = "reports.tally.dev/changed-at"

// EncodeChangedAt renders the times of results, in order, as the value of
// AnnotationChangedAt ("" for none).
func EncodeChangedAt(times []metav1.Timestamp) string {
	var b strings.Builder
	last := -1
	for i, t := range times {
		if i > 0 {
			b.WriteByte(',')
		}
		if i > 0 && t == times[i-1] {
			continue
		}
		b.WriteString(strconv.FormatInt(t.Seconds, 10))
		if t.Nanos != 0 {
			fmt.Fprintf(&b, ".%09d", t.Nanos)
		}
		last = b.Len()
	}
	if last < 0 {
		return ""
	}
	return b.String()[:last] // trailing repeats are implied
}

// FillChangedAt gives each result without a timestamp its time from value
// (AnnotationChangedAt). Results that carry a timestamp keep it. A malformed
// value is an error naming the element; results it does not reach keep a
// zero timestamp.
func FillChangedAt(results []wgv1alpha2.PolicyReportResult, value string) error {
	if value == "" {
		return nil
	}
	var cur metav1.Timestamp
	elems := strings.Split(value, ",")
	for i := range results {
		if i < len(elems) && elems[i] != "" {
			t, err := parseChangedAt(elems[i])
			if err != nil {
				return fmt.Errorf("annotation %s, element %d %q: %w", AnnotationChangedAt, i, elems[i], err)
			}
			cur = t
		}
		if results[i].Timestamp == (metav1.Timestamp{}) {
			results[i].Timestamp = cur
		}
	}
	return nil
}

func parseChangedAt(s string) (metav1.Timestamp, error) {
	sec, frac, dotted := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return metav1.Timestamp{}, fmt.Errorf("seconds: %w", err)
	}
	var nanos int64
	if dotted {
		if len(frac) != 9 {
			return metav1.Timestamp{}, fmt.Errorf("nanoseconds must have nine digits")
		}
		if nanos, err = strconv.ParseInt(frac, 10, 32); err != nil || nanos < 0 {
			return metav1.Timestamp{}, fmt.Errorf("nanoseconds: %q", frac)
		}
	}
	return metav1.Timestamp{Seconds: secs, Nanos: int32(nanos)}, nil
}
