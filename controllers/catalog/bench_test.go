package catalog

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/internal/corpus"
	"github.com/tally-dev/tally/internal/pss"
)

// BenchmarkReadPodSecurity reads the 17 Pod Security ClusterPolicies as
// tally-scanner does when they are created: once for the scan and once for
// the admission bridge. "shared" is one catalog between the two (what
// tally-scanner runs); "unshared" compiles for each reader.
func BenchmarkReadPodSecurity(b *testing.B) {
	dir := corpus.Path(b, "policy-library", "pod-security")
	docs, err := pss.Read(dir)
	if err != nil {
		b.Fatal(err)
	}
	version := 0
	objs := func() []*unstructured.Unstructured {
		version++ // a new version of every policy: each iteration compiles
		out := make([]*unstructured.Unstructured, len(docs))
		for i, d := range docs {
			u := &unstructured.Unstructured{Object: d}
			u = u.DeepCopy()
			u.SetResourceVersion(strconv.Itoa(version))
			out[i] = u
		}
		return out
	}
	for _, bc := range []struct {
		name    string
		catalog *Catalog
	}{{"shared", New()}, {"unshared", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				us := objs()
				b.StartTimer()
				for range 2 { // the scan, then the admission bridge
					for _, u := range us {
						if _, err := bc.catalog.Read(apiresources.ClusterPolicy, u); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}
