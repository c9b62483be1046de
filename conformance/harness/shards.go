package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tally-dev/tally/conformance"
)

// Sharded, the local provider runs several scanner pairs (scanner-<i> and
// merger-<i>, as the Pods of tally-scanner's Deployment with replicas > 1)
// that divide the namespaces through their membership Leases
// (tally-scanner --sharding). The webhook configuration calls a TCP proxy
// that passes each connection to a live pair's webhook in turn, as the
// webhook's Service does.

// pairProcesses names the processes of pair i.
func pairProcesses(i int) (scanner, merger string) {
	return fmt.Sprintf("scanner-%d", i), fmt.Sprintf("merger-%d", i)
}

// pairOf splits a process name into its kind (scanner, merger) and its
// pair's suffix ("-<i>"; "" unsharded).
func pairOf(name string) (kind, suffix string) {
	for _, k := range []string{"scanner", "merger"} {
		if rest, ok := strings.CutPrefix(name, k+"-"); ok {
			if _, err := strconv.Atoi(rest); err == nil {
				return k, "-" + rest
			}
		}
	}
	return name, ""
}

// livePairs are the indexes of the pairs running (sharded).
func (l *Local) livePairs() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pairs)
}

// addPair allocates the ports of a new pair and starts it.
func (l *Local) addPair(ctx context.Context) (int, error) {
	l.mu.Lock()
	i := l.nextPair
	l.nextPair++
	l.mu.Unlock()
	scanner, merger := pairProcesses(i)
	ports := map[string]int{}
	for _, name := range []string{scanner, merger, fmt.Sprintf("handover-%d", i), fmt.Sprintf("scanner-webhook-%d", i)} {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		ports[name] = p
	}
	l.mu.Lock()
	for k, v := range ports {
		l.ports[k] = v
	}
	l.pairs = append(l.pairs, i)
	l.mu.Unlock()
	for _, name := range []string{scanner, merger} {
		if err := l.start(ctx, name); err != nil {
			return 0, err
		}
	}
	return i, nil
}

// removePair stops pair i with a signal (SIGKILL: a crash; SIGTERM: a Pod
// deleted, which leaves its Lease).
func (l *Local) removePair(i int, sig syscall.Signal) {
	l.mu.Lock()
	l.pairs = slices.DeleteFunc(l.pairs, func(p int) bool { return p == i })
	l.mu.Unlock()
	scanner, merger := pairProcesses(i)
	l.kill(scanner, sig)
	l.kill(merger, sig)
}

// port returns a process's port.
func (l *Local) port(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ports[name]
}

// waitReady waits until a process answers /readyz (a new pair's scanner
// is ready once it has scanned its first shard).
func (l *Local) waitReady(ctx context.Context, name string) error {
	url := "http://127.0.0.1:" + strconv.Itoa(l.port(name)) + "/readyz"
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close() // the status is all that is read
		return resp.StatusCode == http.StatusOK, nil
	})
}

// restartPairs restarts the scanners or the mergers of every pair
// (SIGKILL, then started again, as crashed containers), or changes the
// pairs (changePairs).
func (l *Local) restartPairs(ctx context.Context, component string) error {
	if component != "scanner" && component != "merger" {
		return l.changePairs(ctx, component)
	}
	live := l.livePairs()
	var names []string
	for _, i := range live {
		scanner, merger := pairProcesses(i)
		names = append(names, map[string]string{"scanner": scanner, "merger": merger}[component])
	}
	for _, name := range names {
		l.kill(name, syscall.SIGKILL)
	}
	for _, name := range names {
		if err := l.start(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// changePairs carries out the "shards" restarts.
func (l *Local) changePairs(ctx context.Context, change string) error {
	switch change {
	case "replica-killed":
		live := l.livePairs()
		if len(live) < 2 {
			return fmt.Errorf("%s: %d pair(s) running, want two at least", change, len(live))
		}
		l.removePair(live[len(live)-1], syscall.SIGKILL)
		return nil
	case "replica-added":
		_, err := l.addPair(ctx)
		return err
	case "replicas-rolled":
		// As a Deployment's rolling update (maxSurge 1, maxUnavailable 0):
		// a new Pod first, the old one deleted once the new one is ready.
		for _, old := range l.livePairs() {
			i, err := l.addPair(ctx)
			if err != nil {
				return err
			}
			scanner, _ := pairProcesses(i)
			if err := l.waitReady(ctx, scanner); err != nil {
				return fmt.Errorf("%s: pair %d not ready: %w", change, i, err)
			}
			l.removePair(old, syscall.SIGTERM)
		}
		return nil
	}
	return fmt.Errorf("restart %s: %w", change, conformance.ErrUnsupported)
}

// serveWebhookProxy passes each connection to the webhook of a live pair,
// in turn, as a Service would (the pairs share one serving certificate).
func (l *Local) serveWebhookProxy(ln net.Listener) {
	var next atomic.Uint64
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed by Stop
		}
		go func() {
			defer c.Close()
			live := l.livePairs()
			start := int(next.Add(1))
			for k := range live {
				i := live[(start+k)%len(live)]
				up, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(l.port(fmt.Sprintf("scanner-webhook-%d", i))), time.Second)
				if err != nil {
					continue // not listening (yet, or any more): the next
				}
				go func() {
					_, _ = io.Copy(up, c) // the connection ends either way
					_ = up.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(c, up) // the connection ends either way
				up.Close()
				return
			}
		}()
	}
}

// shardedMetrics gathers the metrics of every live pair's component into
// one exposition, as a query over the Deployment would (sumMetrics with
// shards: a result is counted by the pair that owns its resource).
func (l *Local) shardedMetrics(ctx context.Context, component string) ([]byte, error) {
	var texts [][]byte
	for _, i := range l.livePairs() {
		scanner, merger := pairProcesses(i)
		name := scanner
		if component == "merger" {
			name = merger
		}
		text, err := l.metricsOf(ctx, l.port(name))
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", name, err)
		}
		texts = append(texts, text)
	}
	return sumMetrics(texts, true)
}
