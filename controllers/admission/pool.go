package admission

import "runtime"

// evalPool runs request evaluations on long-lived goroutines. A fresh
// goroutine per request starts with a small stack that the engine's
// recursion grows again every time (runtime.newstack was 15% of a
// request's CPU); a worker's grown stack serves the next request. When
// every worker is busy (or hung on a pathological input) a request gets a
// goroutine of its own, so the pool never delays or blocks an answer.
type evalPool struct{ jobs chan func() }

func newEvalPool() *evalPool {
	p := &evalPool{jobs: make(chan func())}
	for range 2 * runtime.GOMAXPROCS(0) {
		go func() {
			for job := range p.jobs {
				job()
			}
		}()
	}
	return p
}

func (p *evalPool) run(job func()) {
	select {
	case p.jobs <- job:
	default:
		go job()
	}
}
