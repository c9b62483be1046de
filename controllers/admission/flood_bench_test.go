package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/hack/admissionbench/workload"
)

// BenchmarkForgedFlood is what a caller without client authentication can
// make the webhook hold (docs/security.md): 240 reviews posted at once, each
// a made-up Pod carrying a 2.9 MB annotation (just under the 3 MiB bound),
// against the Pod Security Standards policies. It reports how many were
// answered and how many refused unread (429), and the heap's peak above
// what it was before the flood (the bodies themselves, built beforehand,
// are not counted).
func BenchmarkForgedFlood(b *testing.B) {
	br := pssBridge(b)
	srv := httptest.NewServer(br)
	defer srv.Close()
	const senders = 240
	filler := strings.Repeat("x", 2_900_000)
	bodies := make([][]byte, senders)
	for i := range bodies {
		var review map[string]any
		if err := json.Unmarshal(workload.PodReview(i, "flood"), &review); err != nil {
			b.Fatal(err)
		}
		md := review["request"].(map[string]any)["object"].(map[string]any)["metadata"].(map[string]any)
		md["annotations"] = map[string]any{"filler": filler}
		data, err := json.Marshal(review)
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = data
	}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: senders, MaxIdleConnsPerHost: senders}}
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 { rtmetrics.Read(sample); return sample[0].Value.Uint64() }
	var answered, refused, other atomic.Int64
	var peak uint64
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		base := heap()
		stop := make(chan struct{})
		sampled := make(chan uint64)
		go func() {
			var top uint64
			for {
				if h := heap(); h > top {
					top = h
				}
				select {
				case <-stop:
					sampled <- top
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		var wg sync.WaitGroup
		for _, body := range bodies {
			wg.Go(func() {
				resp, err := client.Post(srv.URL+"/validate", "application/json", bytes.NewReader(body))
				if err != nil {
					other.Add(1)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					answered.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		wg.Wait()
		close(stop)
		if top := <-sampled; top > base && top-base > peak {
			peak = top - base
		}
	}
	b.ReportMetric(float64(answered.Load())/float64(b.N), "answered/op")
	b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
	b.ReportMetric(float64(other.Load())/float64(b.N), "failed/op")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
