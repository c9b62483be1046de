package pair

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tally-dev/tally/controllers/handover"
)

// scanner plays the scanner's hand-over endpoints: /readyz and /shard.
type scanner struct {
	mu          sync.Mutex
	status      int // of /readyz; 0: the connection is refused (closed)
	incarnation string
	members     []string
}

func (s *scanner) set(status int, incarnation string) {
	s.mu.Lock()
	s.status, s.incarnation = status, incarnation
	s.mu.Unlock()
}

func (s *scanner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/readyz":
		if s.status == 0 {
			// Not answering: the probe fails without "not ready".
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
			return
		}
		w.WriteHeader(s.status)
		if s.status == http.StatusOK {
			_, _ = w.Write([]byte("ok " + s.incarnation))
		}
	case "/shard":
		_ = json.NewEncoder(w).Encode(handover.Shard{Self: "a", Members: s.members, Incarnation: s.incarnation})
	default:
		http.NotFound(w, r)
	}
}

// merger records its runs.
type merger struct {
	mu    sync.Mutex
	runs  int
	shard func(string) bool
	live  bool
}

func (m *merger) SetBackground(dynamic.Interface) {}
func (m *merger) SetShard(f func(string) bool) {
	m.mu.Lock()
	m.shard = f
	m.mu.Unlock()
}
func (m *merger) Synced() bool { return true }
func (m *merger) Run(ctx context.Context) error {
	m.mu.Lock()
	m.runs++
	m.live = true
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.live = false
	m.mu.Unlock()
	return nil
}
func (m *merger) state() (runs int, live bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs, m.live
}

// step moves the clock on by d in steps of 100 ms, each followed by a
// moment of real time for the follower to probe.
func step(clk *clocktesting.FakeClock, d time.Duration) {
	for range d / (100 * time.Millisecond) {
		clk.Step(100 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
}

// until steps the clock until cond holds, failing past limit on it.
func until(t *testing.T, clk *clocktesting.FakeClock, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	start := clk.Now()
	for !cond() {
		if clk.Since(start) > limit {
			t.Fatalf("%s: not within %s on the clock", what, limit)
		}
		step(clk, 100*time.Millisecond)
	}
}

// The merger runs only while its scanner is ready, on the scanner's
// current run and shard; it stops at once when the scanner says it is not
// ready or another run answers, and after ReadyFailures probes nobody
// answers; then it waits and starts afresh.
func TestTheMergerFollowsItsScanner(t *testing.T) {
	sc := &scanner{status: http.StatusServiceUnavailable, members: []string{"a", "b"}}
	srv := httptest.NewServer(sc)
	defer srv.Close()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC))
	m := &merger{}
	f := NewFollower(m, srv.URL+"/", clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	step(clk, 3*time.Second)
	if runs, _ := m.state(); runs != 0 {
		t.Fatalf("the merger ran %d times while its scanner was not ready", runs)
	}
	if !f.Synced() {
		t.Error("a waiting merger is not synced: its Pod would never be ready")
	}
	sc.set(http.StatusOK, "run-1")
	until(t, clk, 2*time.Second, "the merger runs once the scanner is ready", func() bool { _, live := m.state(); return live })
	m.mu.Lock()
	owns := m.shard
	m.mu.Unlock()
	if owns == nil {
		t.Fatal("the scanner's shard was not given to the merger")
	}

	// Another run of the scanner answers: the merger starts afresh on it.
	sc.set(http.StatusOK, "run-2")
	until(t, clk, 3*time.Second, "a second run on the scanner's new run", func() bool { runs, live := m.state(); return runs == 2 && live })

	// The scanner says it is not ready: merging pauses at the next probe.
	sc.set(http.StatusServiceUnavailable, "")
	until(t, clk, 1500*time.Millisecond, "merging paused at once", func() bool { _, live := m.state(); return !live })
	sc.set(http.StatusOK, "run-2")
	until(t, clk, 3*time.Second, "merging resumed", func() bool { runs, live := m.state(); return runs == 3 && live })

	// The scanner stops answering: the merger goes on through two failed
	// probes, and stops at the third.
	sc.set(0, "")
	step(clk, 2*ReadyProbeEvery)
	if _, live := m.state(); !live {
		t.Fatal("the merger stopped before ReadyFailures probes failed")
	}
	until(t, clk, 2*time.Second, "the merger stops after ReadyFailures failed probes", func() bool { _, live := m.state(); return !live })

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
