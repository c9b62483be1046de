package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
)

// served reports which of gvrs the API server serves. A group version it
// does not serve (not found) is simply left out; any other discovery error
// (the API server unreachable, an aggregated API down) is retried with
// backoff until ctx ends, so that a kind is not left unwatched for the life
// of the process because of a moment's outage at its start.
func served(ctx context.Context, disc discovery.DiscoveryInterface, gvrs ...schema.GroupVersionResource) []schema.GroupVersionResource {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
	for {
		out, err := servedOnce(disc, gvrs...)
		if err == nil || ctx.Err() != nil {
			return out
		}
		logr.FromContextOrDiscard(ctx).Error(err, "discovery failed; retrying")
		if c, ok := disc.(discovery.CachedDiscoveryInterface); ok {
			c.Invalidate()
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(backoff.Step()):
		}
	}
}

// servedOnce is one pass of served; the error joins the discovery errors
// other than not found.
func servedOnce(disc discovery.DiscoveryInterface, gvrs ...schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	var errs []error
	for _, gvr := range gvrs {
		list, err := disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if apierrors.IsNotFound(err) || errors.Is(err, memory.ErrCacheNotFound) {
			continue // not served (a cached discovery says so with its own error)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", gvr.GroupVersion(), err))
			continue
		}
		for _, r := range list.APIResources {
			if r.Name == gvr.Resource {
				out = append(out, gvr)
				break
			}
		}
	}
	return out, errors.Join(errs...)
}
