package admission

import (
	"sync"
	"testing"
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
