package admission

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/hack/admissionbench/workload"
	"github.com/tally-dev/tally/internal/pss"

	"github.com/tally-dev/tally/internal/corpus"
)

// pssBridge is a bridge holding the corpus's Pod Security Standards policies
// (internal/corpus); the benchmark skips without them.
func pssBridge(b *testing.B) *Bridge {
	b.Helper()
	dir := corpus.Path(b, "policy-library", "pod-security")
	policies, err := pss.Read(dir)
	if err != nil {
		b.Fatal(err)
	}
	br := New(nil, nil, nil, Options{})
	for _, p := range policies {
		br.policies.Upsert(context.Background(), apiresources.ClusterPolicy, &unstructured.Unstructured{Object: p})
	}
	if n := len(br.policies.current().policies); n != len(policies) {
		b.Fatalf("%d of %d policies compiled", n, len(policies))
	}
	return br
}

// BenchmarkServeHTTP is the in-process cost of one Pod CREATE review with
// the Pod Security Standards policies: decode, evaluate, answer, aggregate
// (the report writes happen later, in batches, and are not included).
func BenchmarkServeHTTP(b *testing.B) {
	br := pssBridge(b)
	const distinct = 256 // UIDs repeat, so the pending aggregate stays bounded
	reviews := make([][]byte, distinct)
	for i := range reviews {
		reviews[i] = workload.PodReview(i, "bench")
	}
	denied := 0
	for _, body := range reviews[:4] {
		w := httptest.NewRecorder()
		br.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
		if bytes.Contains(w.Body.Bytes(), []byte(`"allowed":false`)) {
			denied++
		}
	}
	if denied == 0 {
		b.Fatal("no review was denied: the privileged Pod must fail the Enforce policies")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		w := httptest.NewRecorder()
		br.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(reviews[i%distinct])))
	}
}
