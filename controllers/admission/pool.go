package admission

import (
	"runtime"
	"sync"
)

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
//
// Workers start on demand, up to the bound, and live until stop, which
// waits for every goroutine of the pool: the constructor starts nothing.
type evalPool struct {
	jobs     chan func()
	overflow chan struct{} // a semaphore of the goroutines beyond the workers
	workers  int           // the bound on long-lived workers

	mu      sync.RWMutex // held for reading while a job is handed to an idle worker
	stopped bool
	started int // workers started
	wg      sync.WaitGroup
}

// Pool sizes: workers and the goroutines allowed beyond them; and the
// webhook's connections at once (issue 39: a bound before any work).
var (
	poolWorkers    = 2 * runtime.GOMAXPROCS(0)
	poolOverflow   = 2 * poolWorkers
	maxConnections = 4 * (poolWorkers + poolOverflow)
)

func newEvalPool(workers, overflow int) *evalPool {
	return &evalPool{jobs: make(chan func()), overflow: make(chan struct{}, overflow), workers: workers}
}

// run starts job on an idle worker, on a new worker while fewer than the
// bound were started, or on a goroutine of its own while fewer than the
// overflow bound run so; it returns false, and job is not run, when all are
// busy or the pool was stopped.
func (p *evalPool) run(job func()) bool {
	p.mu.RLock()
	if p.stopped {
		p.mu.RUnlock()
		return false
	}
	select {
	case p.jobs <- job:
		p.mu.RUnlock()
		return true
	default:
	}
	p.mu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	if p.started < p.workers {
		p.started++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			job()
			for job := range p.jobs {
				job()
			}
		}()
		return true
	}
	select {
	case p.overflow <- struct{}{}:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.overflow }()
			job()
		}()
		return true
	default:
		return false
	}
}

// stop refuses new jobs, lets the running ones finish and waits for every
// goroutine of the pool to end.
func (p *evalPool) stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.jobs)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
