package report

import "testing"

// A policy's results are kept out of the reports when it carries
// reports.kyverno.io/disabled with any value, as Kyverno reads the label.
func TestReportingDisabled(t *testing.T) {
	for labels, want := range map[*map[string]string]bool{
		{}:                                     false,
		{"team": "a"}:                          false,
		{LabelReportsDisabled: "true"}:         true,
		{LabelReportsDisabled: ""}:             true,
		{LabelReportsDisabled: "false"}:        true,
		{"reports.kyverno.io/enabled": "true"}: false,
	} {
		if got := ReportingDisabled(*labels); got != want {
			t.Errorf("%v: %v, want %v", *labels, got, want)
		}
	}
}
