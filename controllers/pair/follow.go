package pair

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/controllers/handover"
	"github.com/tally-dev/tally/controllers/shard"
)

// Merger is what a Follower runs: controllers/merge's Merger.
type Merger interface {
	// SetBackground and SetShard set, for the next Run, where the
	// scanner's BackgroundScanReports are read and which namespaces are
	// merged (nil: all).
	SetBackground(dynamic.Interface)
	SetShard(func(namespace string) bool)
	Run(ctx context.Context) error
	Synced() bool
}

// Follower runs the merger while the scanner beside it is ready: it leads
// (or holds a shard) and has scanned everything. A standby Pod's merger
// waits (and is ready for its probes: it has nothing to sync); when the
// scanner stops being ready (it lost its Lease and exits, or restarts, or
// its shard changes) the merger stops writing within ReadyFailures probes
// (at once when the scanner says so, or another run of it answers) and
// waits again, then starts afresh from what the scanner's new run scanned.
type Follower struct {
	merger Merger
	// base is the scanner's --handover-listen URL.
	base   string
	client *http.Client
	clock  clock.WithTicker

	running atomic.Bool
}

// Probing the scanner beside the merger.
const (
	ReadyProbeEvery = time.Second
	ReadyFailures   = 3
)

// NewFollower follows the scanner whose hand-over is served at scannerURL
// (http or https, no trailing slash needed); c nil is the real clock.
func NewFollower(m Merger, scannerURL string, c clock.WithTicker) *Follower {
	if c == nil {
		c = clock.RealClock{}
	}
	return &Follower{merger: m, base: strings.TrimSuffix(scannerURL, "/"), client: &http.Client{Timeout: 2 * time.Second}, clock: c}
}

// Run follows the scanner until ctx ends, or the merger fails.
func (f *Follower) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	for {
		log.Info("waiting for the scanner beside the merger to be ready", "url", f.base+"/readyz")
		incarnation, ok := f.waitReady(ctx)
		if !ok {
			return nil
		}
		// The merger merges the namespaces the scanner scans.
		sh, err := f.shard(ctx)
		if err != nil || sh.Incarnation != incarnation {
			log.Info("the scanner's shard could not be read, or it changed meanwhile: asking again", "error", fmt.Sprint(err))
			select {
			case <-ctx.Done():
				return nil
			case <-f.clock.After(ReadyProbeEvery):
			}
			continue
		}
		// The hand-over is read under the incarnation: a later run of the
		// scanner (a new shard) answers Gone there rather than its reports.
		bg, err := dynamic.NewForConfig(&rest.Config{Host: f.base + handover.IncarnationPath(incarnation), QPS: -1})
		if err != nil {
			return fmt.Errorf("--scanner-url: %w", err)
		}
		f.merger.SetBackground(bg)
		if len(sh.Members) > 0 {
			a := shard.Assignment{Self: sh.Self, Members: sh.Members}
			f.merger.SetShard(a.Owns)
			log.Info("merging the scanner's shard", "shard", a.String())
		} else {
			f.merger.SetShard(nil)
		}
		runCtx, cancel := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			f.watchReady(runCtx, cancel, incarnation)
		}()
		f.running.Store(true)
		err = f.merger.Run(runCtx)
		f.running.Store(false)
		cancel()
		<-stopped
		if err != nil || ctx.Err() != nil {
			return err
		}
		log.Info("the scanner beside the merger is not ready any more: merging paused")
	}
}

// Synced: a merger that waits has nothing to sync.
func (f *Follower) Synced() bool { return !f.running.Load() || f.merger.Synced() }

// probe asks the scanner whether it is ready, and which run of it answered
// (its hand-over's incarnation); notReady says it answered that it is not
// (rather than not answering).
func (f *Follower) probe(ctx context.Context) (id string, ok, notReady bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/readyz", nil)
	if err != nil {
		return "", false, false
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return "", false, false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	_ = resp.Body.Close() // read already: a failed close loses nothing
	if err != nil {
		return "", false, false
	}
	if resp.StatusCode != http.StatusOK {
		return "", false, resp.StatusCode == http.StatusServiceUnavailable
	}
	return strings.TrimSpace(strings.TrimPrefix(string(body), "ok")), true, false
}

// shard reads the shard of the scanner beside the merger (handover.Shard).
func (f *Follower) shard(ctx context.Context) (handover.Shard, error) {
	var sh handover.Shard
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/shard", nil)
	if err != nil {
		return sh, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return sh, err
	}
	defer func() { _ = resp.Body.Close() }() // read already: a failed close loses nothing
	if resp.StatusCode != http.StatusOK {
		return sh, fmt.Errorf("%s/shard: %s", f.base, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&sh)
	return sh, err
}

// waitReady polls until the scanner is ready and returns its incarnation;
// false when ctx ended first.
func (f *Follower) waitReady(ctx context.Context) (string, bool) {
	t := f.clock.NewTicker(ReadyProbeEvery / 2)
	defer t.Stop()
	for {
		if id, ok, _ := f.probe(ctx); ok {
			return id, true
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-t.C():
		}
	}
}

// watchReady calls stop after ReadyFailures failed probes in a row, or at
// once when another run of the scanner answers (one that restarted between
// two probes) or it says it is not ready (its shard is changing).
func (f *Follower) watchReady(ctx context.Context, stop context.CancelFunc, incarnation string) {
	t := f.clock.NewTicker(ReadyProbeEvery)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		id, ok, notReady := f.probe(ctx)
		if (ok && id != incarnation) || notReady {
			stop()
			return
		}
		if ok {
			failures = 0
			continue
		}
		if failures++; failures >= ReadyFailures && ctx.Err() == nil {
			stop()
			return
		}
	}
}
