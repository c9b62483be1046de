package merge

import (
	"fmt"
	"testing"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// BenchmarkMerge merges what a Pod under the 17 Pod Security Standards
// policies has: 19 background results and 6 newer admission results.
//
//	go test -run '^$' -bench BenchmarkMerge -cpu 1 ./controllers/merge/
func BenchmarkMerge(b *testing.B) {
	in := Input{Policies: map[string]PolicyInfo{}, BackgroundCurrent: true}
	for i := range 17 {
		name := fmt.Sprintf("disallow-thing-%02d", i)
		rules := []string{name}
		if i < 2 {
			rules = append(rules, "autogen-"+name)
		}
		in.Policies[name] = pol(true, true, rules...)
		for _, r := range rules {
			result := pass
			if i%6 == 0 {
				result = fail
			}
			in.Background = append(in.Background, res(name, r, result, 100))
			if i%3 == 0 {
				in.Admission = append(in.Admission, res(name, r, pass, 200))
			}
		}
	}
	var out []wgv1alpha2.PolicyReportResult
	b.ReportAllocs()
	for b.Loop() {
		out = Merge(in)
	}
	if len(out) != 19 {
		b.Fatalf("merged %d results, want 19", len(out))
	}
	b.ReportMetric(float64(b.N*(len(in.Background)+len(in.Admission)))/b.Elapsed().Seconds(), "results/s")
}
