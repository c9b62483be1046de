package admission

import (
	"sync"
	"testing"
	"time"
)

func TestThePoolIsBounded(t *testing.T) {
	// No worker (whether an idle worker is ready to take a job is a race):
	// two goroutines beyond the workers at most.
	p := newEvalPool(0, 2)
	release := make(chan struct{})
	var started, finished sync.WaitGroup
	block := func() { started.Done(); <-release; finished.Done() }
	for i := range 2 {
		started.Add(1)
		finished.Add(1)
		if !p.run(block) {
			t.Fatalf("job %d refused with room left", i)
		}
		started.Wait()
	}
	if p.run(func() { t.Error("a refused job ran") }) {
		t.Fatal("a third job was accepted: the pool is unbounded")
	}
	close(release)
	finished.Wait()
	ran := make(chan struct{})
	for !p.run(func() { close(ran) }) {
		// the overflow goroutines release their slots as they end
	}
	<-ran
}

func TestStopWaitsForTheJobsAndRefusesMore(t *testing.T) {
	p := newEvalPool(2, 2)
	release := make(chan struct{})
	var started sync.WaitGroup
	ended := make(chan int, 4)
	for i := range 4 { // two workers, two overflow goroutines
		started.Add(1)
		if !p.run(func() { started.Done(); <-release; ended <- i }) {
			t.Fatalf("job %d refused with room left", i)
		}
	}
	started.Wait()
	stopped := make(chan struct{})
	go func() { p.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stop returned while jobs ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-stopped
	if len(ended) != 4 {
		t.Errorf("%d jobs ended before stop returned, want 4", len(ended))
	}
	if p.run(func() { t.Error("a job ran after stop") }) {
		t.Error("a job was accepted after stop")
	}
	p.stop() // twice is fine
}
