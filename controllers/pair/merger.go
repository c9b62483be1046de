package pair

import (
	"context"

	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/controllers/merge"
	"github.com/tally-dev/tally/internal/process"
)

// MergerOptions are what the merger of a pair runs with: tally-merger's
// flags.
type MergerOptions struct {
	process.Options
	Merge merge.Options
	// ScannerURL is where the scanner beside the merger hands over its
	// BackgroundScanReports (--scanner-url).
	ScannerURL string
	// KeySecret is the Secret in Namespace holding the key the final
	// reports are signed with (--report-key-secret).
	KeySecret string
	// Clock times what the merger and its follower wait for (nil: the
	// real clock).
	Clock clock.WithTicker
}

// RunMerger runs a pair's merger until ctx ends or it fails: it follows
// the scanner beside it (merging while that scanner is ready, with the
// scanner's shard and hand-over), and serves its probes and metrics. Like
// RunScanner it takes its clock, registry and clients from one
// environment (its logger from ctx), and returns once every goroutine it
// started has ended.
func RunMerger(ctx context.Context, o MergerOptions) error {
	env, err := newEnv(&o.Options, envOptions{Clock: o.Clock, SharedRateLimit: true})
	if err != nil {
		return err
	}
	mo := o.Merge
	if mo.Key, mo.LegacySeeds, err = merge.LoadKey(ctx, env.Kube, o.Namespace, o.KeySecret); err != nil {
		return err
	}
	mo.Registry, mo.RESTConfig, mo.Now, mo.Clock = env.Registry, env.Config, env.Clock.Now, env.Clock
	mo.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Discovery))
	// The final reports' metadata, watched so that one someone else
	// changes is put right (R48).
	if mo.Metadata, err = metadata.NewForConfig(env.Config); err != nil {
		return err
	}
	// The hand-over's client is made for each run of the scanner followed
	// (under its incarnation).
	m := merge.New(env.Dynamic, mo)
	defer m.Close()
	return process.Run(ctx, o.Options, env.Config, env.Registry, NewFollower(m, o.ScannerURL, env.Clock), nil)
}
