package tester

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tally-dev/tally/internal/corpus"
)

// BenchmarkCorpus runs the whole of Kyverno's CLI test corpus
// (../shared/corpus) and BenchmarkCorpusBeyond the folders beyond
// validate (../shared/corpus-beyond), as `tally test` runs them; each
// reports ns/expectation, the figure that must not grow.
func BenchmarkCorpus(b *testing.B) { benchmarkSuite(b, corpus.Dir(b)) }

func BenchmarkCorpusBeyond(b *testing.B) { benchmarkSuite(b, corpus.BeyondDir(b)) }

func benchmarkSuite(b *testing.B, dir string) {
	index, err := LoadIndex(filepath.Join(dir, "INDEX.tsv"))
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Index: index}
	var expectations int
	b.ResetTimer()
	for b.Loop() {
		rep, err := RunWith(context.Background(), []string{dir}, opts)
		if err != nil {
			b.Fatal(err)
		}
		expectations = len(rep.Outcomes)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(expectations), "ns/expectation")
}
