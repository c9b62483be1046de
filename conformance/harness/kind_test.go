package harness

import (
	"strings"
	"testing"
)

func TestSumMetricsAddsCountersAndKeepsTheLeadersGauges(t *testing.T) {
	leader := `# HELP reqs_total Requests.
# TYPE reqs_total counter
reqs_total{op="CREATE"} 2
# HELP since Seconds since.
# TYPE since gauge
since{policy="p"} 5
# HELP dur Durations.
# TYPE dur histogram
dur_bucket{le="1"} 1
dur_bucket{le="+Inf"} 2
dur_sum 3
dur_count 2
`
	other := `# HELP reqs_total Requests.
# TYPE reqs_total counter
reqs_total{op="CREATE"} 3
reqs_total{op="UPDATE"} 1
# HELP since Seconds since.
# TYPE since gauge
since{policy="p"} 900
since{policy="q"} 7
# HELP dur Durations.
# TYPE dur histogram
dur_bucket{le="1"} 4
dur_bucket{le="+Inf"} 4
dur_sum 1
dur_count 4
`
	out, err := sumMetrics([][]byte{[]byte(leader), []byte(other)}, false)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{
		`reqs_total{op="CREATE"} 5`, `reqs_total{op="UPDATE"} 1`,
		`since{policy="p"} 5`, `since{policy="q"} 7`,
		`dur_bucket{le="1"} 5`, `dur_bucket{le="+Inf"} 6`, `dur_sum 4`, `dur_count 6`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if _, err := sumMetrics([][]byte{[]byte("not metrics {")}, false); err == nil {
		t.Error("a malformed exposition was accepted")
	}
}
