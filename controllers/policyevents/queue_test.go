package policyevents

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

type notes struct {
	mu  sync.Mutex
	got []string
}

func (n *notes) Eventf(_, _ runtime.Object, _, reason, _, note string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, reason+" "+fmt.Sprintf(note, args...))
}

func (n *notes) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

// The queue keeps at most its bound (the rest dropped and counted), then
// hands every Event kept, in order and formatted when recorded, to the
// recorder it was recorded through.
func TestQueueBoundsAndForwardsInOrder(t *testing.T) {
	q := NewQueue(3, 1000, prometheus.NewRegistry())
	scan, admission := &notes{}, &notes{}
	rs, ra := q.Recorder(scan), q.Recorder(admission)
	pod := &corev1.ObjectReference{Kind: "Pod", Name: "p"}
	for i := range 4 {
		rs.Eventf(pod, nil, corev1.EventTypeWarning, "PolicyViolation", "Resource Passed", "scan %d", i)
	}
	ra.Eventf(pod, nil, corev1.EventTypeWarning, "PolicyViolation", "Resource Passed", "admission %s", "x")
	if got := q.Len(); got != 3 {
		t.Fatalf("%d waiting, want 3 (the bound)", got)
	}
	if got := testutil.ToFloat64(q.dropped); got != 2 {
		t.Errorf("dropped = %v, want 2", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return q.Len() == 0 && len(scan.list()) >= 3, nil
	}); err != nil {
		t.Fatalf("not sent: %d waiting, sent %v", q.Len(), scan.list())
	}
	cancel()
	<-done
	if got := fmt.Sprint(scan.list()); got != "[PolicyViolation scan 0 PolicyViolation scan 1 PolicyViolation scan 2]" {
		t.Errorf("scan recorder got %s", got)
	}
	if got := admission.list(); len(got) != 0 {
		t.Errorf("admission recorder got %v, want none (dropped)", got)
	}
}
