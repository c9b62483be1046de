package watch

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// filter passes a watch's events through f, as apimachinery's watch.Filter
// does, but ends when stopped even while an event waits to be read: the
// reflector stops reading before it stops the watch, and watch.Filter's
// goroutine then blocks on its send for the life of the process (a
// goroutine leaked per watch restart, found by the pair's leak check).
func filter(w watch.Interface, f func(watch.Event) (watch.Event, bool)) watch.Interface {
	fw := &filtered{in: w, out: make(chan watch.Event), stop: make(chan struct{}), f: f}
	go fw.loop()
	return fw
}

type filtered struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
	f    func(watch.Event) (watch.Event, bool)
}

func (fw *filtered) ResultChan() <-chan watch.Event { return fw.out }

// Stop stops the upstream watch and the filter, at once.
func (fw *filtered) Stop() {
	fw.once.Do(func() {
		close(fw.stop)
		fw.in.Stop()
	})
}

func (fw *filtered) loop() {
	defer close(fw.out)
	in := fw.in.ResultChan()
	for {
		select {
		case <-fw.stop:
			return
		case e, ok := <-in:
			if !ok {
				return
			}
			e, keep := fw.f(e)
			if !keep {
				continue
			}
			select {
			case fw.out <- e:
			case <-fw.stop:
				return
			}
		}
	}
}
