package admission

import "runtime"

// evalPool runs request evaluations on long-lived goroutines. A fresh
// goroutine per request starts with a small stack that the engine's
// recursion grows again every time (runtime.newstack was 15% of a
// request's CPU); a worker's grown stack serves the next request.
//
// It is bounded. When every worker is busy (or hung on a pathological
// input) a request gets a goroutine of its own, so that a slow evaluation
// never delays the next answer, but only up to overflow such goroutines at
// once. Past that, run refuses the job and the request is answered at once
// as one whose evaluation did not finish: per each policy's failurePolicy
// (Fail denies, Ignore admits with a warning), exactly as a timeout is.
// Queueing instead would only turn the refusal into a timeout later, with
// the request's memory held meanwhile. Evaluations end at their deadline
// (the engine checks its ctx between rules and foreach elements), so the
// overflow drains.
type evalPool struct {
	jobs     chan func()
	overflow chan struct{} // a semaphore of the goroutines beyond the workers
}

// Pool sizes: workers and the goroutines allowed beyond them.
var (
	poolWorkers  = 2 * runtime.GOMAXPROCS(0)
	poolOverflow = 2 * poolWorkers
)

func newEvalPool(workers, overflow int) *evalPool {
	p := &evalPool{jobs: make(chan func()), overflow: make(chan struct{}, overflow)}
	for range workers {
		go func() {
			for job := range p.jobs {
				job()
			}
		}()
	}
	return p
}

// run starts job on an idle worker, or on a goroutine of its own while
// fewer than the overflow bound run so; it returns false, and job is not
// run, when both are full.
func (p *evalPool) run(job func()) bool {
	select {
	case p.jobs <- job:
		return true
	default:
	}
	select {
	case p.overflow <- struct{}{}:
		go func() {
			defer func() { <-p.overflow }()
			job()
		}()
		return true
	default:
		return false
	}
}
