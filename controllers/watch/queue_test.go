package watch

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestProcessNextSurvivesAPanicAndDoesNotRetryHot(t *testing.T) {
	q := NewQueue("test")
	defer q.ShutDown()
	q.Add("bad")
	q.Add("good")
	var reconciled []string
	reconcile := func(_ context.Context, key string) error {
		if key == "bad" {
			panic("boom")
		}
		reconciled = append(reconciled, key)
		return nil
	}
	for range 2 {
		if !q.ProcessNext(context.Background(), "test", reconcile) {
			t.Fatal("the queue shut down")
		}
	}
	if len(reconciled) != 1 || reconciled[0] != "good" {
		t.Errorf("reconciled %v, want [good]: a panic must not stop the other keys", reconciled)
	}
	if q.Panics() != 1 {
		t.Errorf("panics = %d, want 1", q.Panics())
	}
	if q.Len() != 0 {
		t.Errorf("the panicking key is queued again at once (len %d); it must wait %s", q.Len(), PanicBase)
	}
	if !q.Idle() {
		t.Error("in-flight count not released")
	}
}

func TestProcessNextRetriesAFailureWithBackoff(t *testing.T) {
	q := NewQueue("test")
	defer q.ShutDown()
	q.Add("k")
	calls := 0
	reconcile := func(context.Context, string) error {
		calls++
		if calls == 1 {
			return errors.New("transient")
		}
		return nil
	}
	q.ProcessNext(context.Background(), "test", reconcile)
	q.ProcessNext(context.Background(), "test", reconcile) // comes back after RetryBase
	if calls != 2 || q.NumRequeues("k") != 0 {
		t.Errorf("calls %d requeues %d, want 2 and 0", calls, q.NumRequeues("k"))
	}
}

func TestRetryBackoffIsCapped(t *testing.T) {
	rl := RateLimiter()
	var last time.Duration
	for range 100 {
		last = rl.When("k")
	}
	if last != RetryCap {
		t.Errorf("after 100 failures the delay is %s, want the cap %s", last, RetryCap)
	}
}

func TestGuardRecoversAPanicOutsideTheWorkers(t *testing.T) {
	q := NewQueue("test")
	defer q.ShutDown()
	err, panicked := q.Guard(context.Background(), "test", "bad", func(context.Context, string) error { panic("boom") })
	if !panicked || err == nil || q.Panics() != 1 {
		t.Fatalf("err %v, panicked %v, panics %d: want the panic recovered and counted", err, panicked, q.Panics())
	}
	if q.Len() != 0 {
		t.Error("the panicking key is queued again at once")
	}
	if err, panicked := q.Guard(context.Background(), "test", "ok", func(context.Context, string) error { return errors.New("e") }); panicked || err == nil {
		t.Errorf("an error: got %v, panicked %v", err, panicked)
	}
}

func TestProtectRecoversAPassOfAnotherLoop(t *testing.T) {
	q := NewQueue("test")
	defer q.ShutDown()
	if !q.Protect(context.Background(), "test", func() { panic("boom") }) || q.Panics() != 1 {
		t.Fatalf("panics %d: want the panic recovered and counted", q.Panics())
	}
	ran := false
	if q.Protect(context.Background(), "test", func() { ran = true }) || !ran {
		t.Error("a pass that does not panic")
	}
	if q.Len() != 0 {
		t.Error("Protect queued something")
	}
}
