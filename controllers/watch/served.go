package watch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/utils/clock"
)

// Which kinds the API server serves is asked in one way by every process:
// ServedNow for the kinds to start with, FollowServed for those not served
// yet. Both ask discovery again on the same schedule, servedBackoff: from
// ServedRetryFirst, doubling, to ServedRetryMax.
var (
	ServedRetryFirst = time.Second
	ServedRetryMax   = 30 * time.Second
)

func servedBackoff() wait.Backoff {
	return wait.Backoff{Duration: ServedRetryFirst, Factor: 2, Cap: ServedRetryMax, Steps: 1 << 30}
}

// ServedNow returns which of gvrs the API server serves. A group version
// it does not serve (not found) is left out; any other discovery error
// (the API server unreachable, an aggregated API down) is retried until ctx
// ends, so that a kind is not left unwatched for the life of the process
// because of a moment's outage at its start.
func ServedNow(ctx context.Context, disc discovery.DiscoveryInterface, clk clock.Clock, gvrs ...schema.GroupVersionResource) []schema.GroupVersionResource {
	backoff := servedBackoff()
	for {
		out, err := ServedOnce(disc, gvrs...)
		if err == nil || ctx.Err() != nil {
			return out
		}
		logr.FromContextOrDiscard(ctx).Error(err, "discovery failed; retrying")
		if !sleep(ctx, clk, backoff.Step()) {
			return out
		}
		invalidate(disc)
	}
}

// FollowServed calls found once for each of gvrs as soon as discovery
// shows the API server serves it, until every one was found or ctx ends:
// a kind whose CRD is established after the process started (a fresh Helm
// install applies CRDs and Deployments together, Kyverno installed later)
// is picked up then, within ServedRetryMax. It blocks; run it on a
// goroutine the caller waits for.
func FollowServed(ctx context.Context, disc discovery.DiscoveryInterface, clk clock.Clock, gvrs []schema.GroupVersionResource, found func(schema.GroupVersionResource)) {
	rest := slices.Clone(gvrs)
	backoff := servedBackoff()
	for len(rest) > 0 {
		if !sleep(ctx, clk, backoff.Step()) {
			return
		}
		invalidate(disc)
		now, err := ServedOnce(disc, rest...)
		if err != nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("discovery failed; retrying", "error", err.Error())
		}
		for _, gvr := range now {
			logr.FromContextOrDiscard(ctx).Info("kind now served", "resource", gvr.String())
			found(gvr)
		}
		rest = slices.DeleteFunc(rest, func(g schema.GroupVersionResource) bool { return slices.Contains(now, g) })
	}
}

// ServedOnce is one look at which of gvrs the API server serves; the error joins the discovery errors other than
// not found.
func ServedOnce(disc discovery.DiscoveryInterface, gvrs ...schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	var errs []error
	lists := map[schema.GroupVersion][]string{}
	for _, gvr := range gvrs {
		gv := gvr.GroupVersion()
		names, ok := lists[gv]
		if !ok {
			list, err := disc.ServerResourcesForGroupVersion(gv.String())
			switch {
			case apierrors.IsNotFound(err) || errors.Is(err, memory.ErrCacheNotFound):
				// not served (a cached discovery says so with its own error)
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", gv, err))
			case list != nil:
				for _, r := range list.APIResources {
					names = append(names, r.Name)
				}
			}
			lists[gv] = names
		}
		if slices.Contains(names, gvr.Resource) {
			out = append(out, gvr)
		}
	}
	return out, errors.Join(errs...)
}

func invalidate(disc discovery.DiscoveryInterface) {
	if c, ok := disc.(discovery.CachedDiscoveryInterface); ok {
		c.Invalidate()
	}
}

// sleep waits d on clk; false when ctx ended first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
