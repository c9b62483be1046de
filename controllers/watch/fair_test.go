package watch

import (
	"strings"
	"testing"
	"time"
)

func namespaceOf(key string) string { ns, _, _ := strings.Cut(key, "/"); return ns }

// A namespace with many keys queued first does not hold back another's:
// the workers take the namespaces' keys in turn, each namespace's in order.
func TestFairQueueTakesNamespacesInTurn(t *testing.T) {
	q := newRoundRobin(namespaceOf)
	for _, k := range []string{"a/1", "a/2", "a/3", "a/4", "b/1", "a/5", "c/1", "b/2"} {
		q.Push(k)
	}
	var got []string
	for q.Len() > 0 {
		got = append(got, q.Pop())
	}
	want := "a/1 b/1 c/1 a/2 b/2 a/3 a/4 a/5"
	if strings.Join(got, " ") != want {
		t.Errorf("popped %v, want %s", got, want)
	}
	// Emptied and filled again.
	q.Push("d/1")
	q.Push("d/2")
	q.Push("e/1")
	got = got[:0]
	for q.Len() > 0 {
		got = append(got, q.Pop())
	}
	if want := "d/1 e/1 d/2"; strings.Join(got, " ") != want {
		t.Errorf("popped %v, want %s", got, want)
	}
}

// Through the workqueue: with 1,000 keys of one namespace queued, a key of
// another namespace is the second one a worker gets.
func TestFairQueueThroughTheWorkqueue(t *testing.T) {
	q := NewFairQueue("test", namespaceOf)
	defer q.ShutDown()
	for i := range 1000 {
		q.Add("slow/" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	q.Add("other/x")
	first, _ := q.Get()
	second, _ := q.Get()
	if namespaceOf(first) != "slow" || second != "other/x" {
		t.Errorf("got %s then %s, want a key of slow then other/x", first, second)
	}
	q.Done(first)
	q.Done(second)
	// Retries still work (the delaying queue above the fair one).
	q.AddAfter("late/x", time.Millisecond)
	deadline := time.After(5 * time.Second)
	for {
		k, _ := q.Get()
		q.Done(k)
		if k == "late/x" {
			return
		}
		select {
		case <-deadline:
			t.Fatal("the delayed key never came")
		default:
		}
	}
}

func BenchmarkFairQueue(b *testing.B) {
	q := newRoundRobin(namespaceOf)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "ns" + string(rune('a'+i%50)) + "/" + string(rune(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, k := range keys {
			q.Push(k)
		}
		for q.Len() > 0 {
			q.Pop()
		}
	}
}
