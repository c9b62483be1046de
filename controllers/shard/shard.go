// Package shard divides the cluster's namespaces among the live scanner
// pairs through Kubernetes Leases: each replica holds a Lease of its own (its
// membership), renews it as leader election renews its one Lease, and reads
// everyone's; the owner of a namespace is chosen by rendezvous hashing over
// the live members, so that a member joining takes namespaces only from the
// others, and a member leaving hands only its own to the others.
//
// Hand-overs are fenced, not assumed: a member works on an assignment only
// while its own Lease was renewed within the renew deadline (shorter than a
// Lease's duration), stops at once when its view of the members changes, and
// one that has just joined waits a Lease duration before it starts, by when
// every other member has seen its Lease (or lost its own). A member is
// taken for dead when its Lease's renew time has not moved for a Lease
// duration as observed here (as leader election observes, so clock skew
// between machines does not matter), by when it has stopped itself.
package shard

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Labels and names of the membership Leases.
const (
	// LabelMember marks a membership Lease; its value is the group of
	// members (the Deployment's name, tally-scanner), so that two releases
	// in one namespace do not share their shards.
	LabelMember = "tally.dev/shard-member"
	// LeasePrefix starts the name of a member's Lease; its identity follows.
	LeasePrefix = "tally-member-"
)

// Defaults of Options, those of the leader election tally used before it
// sharded (15 s, 10 s, 2 s).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRenewPeriod   = 2 * time.Second
)

// Assignment is one view of the live members, as seen by Self.
type Assignment struct {
	Self string
	// Members are the live members' identities, sorted; Self is one of them.
	Members []string
}

// Owner returns the member that owns a namespace ("" for cluster-scoped
// resources, which the owner of "" takes): the member of the highest
// rendezvous score.
func (a Assignment) Owner(namespace string) string {
	return Owner(a.Members, namespace)
}

// Owns reports whether Self owns a namespace.
func (a Assignment) Owns(namespace string) bool {
	return a.Self != "" && a.Owner(namespace) == a.Self
}

// Equal reports whether two assignments are the same view.
func (a Assignment) Equal(b Assignment) bool {
	return a.Self == b.Self && slices.Equal(a.Members, b.Members)
}

func (a Assignment) String() string {
	return fmt.Sprintf("%s of [%s]", a.Self, strings.Join(a.Members, " "))
}

// Owner returns the member of members that owns a namespace, by rendezvous
// (highest random weight) hashing: "" when there is none.
func Owner(members []string, namespace string) string {
	var best string
	var bestScore uint64
	for _, m := range members {
		if s := score(m, namespace); best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// score is the weight of member for namespace: FNV-1a of both, finished by
// SplitMix64's mixer so that similar names spread evenly.
func score(member, namespace string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member)) // hash.Hash's Write never fails
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(namespace))
	z := h.Sum64()
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Options configure a member.
type Options struct {
	// Client reads and writes the Leases.
	Client    kubernetes.Interface
	Namespace string
	// Group is the value of LabelMember: the members that shard together.
	Group    string
	Identity string
	// Owner, when set, owns the membership Lease: the replica's Pod, so
	// that the garbage collector deletes the Lease with the Pod. A Pod
	// deleted without warning (evicted, its node lost, SIGKILL) never
	// deletes its Lease itself, and each Pod of a Deployment is a new
	// identity: without an owner, such Leases stay, expired, for good.
	Owner *metav1.OwnerReference
	// LeaseDuration, RenewDeadline and RenewPeriod are leader election's:
	// a Lease not renewed for LeaseDuration is dead; a member stops working
	// once it could not renew for RenewDeadline; it renews every RenewPeriod.
	LeaseDuration, RenewDeadline, RenewPeriod time.Duration
	Clock                                     clock.WithTicker
	Registry                                  prometheus.Registerer
	// Recorder, when set, tells of the Leases that do not count (verify.go).
	Recorder record.EventRecorder
}

func (o *Options) defaults() error {
	o.LeaseDuration = cmp.Or(o.LeaseDuration, DefaultLeaseDuration)
	o.RenewDeadline = cmp.Or(o.RenewDeadline, DefaultRenewDeadline)
	o.RenewPeriod = cmp.Or(o.RenewPeriod, DefaultRenewPeriod)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.RenewDeadline >= o.LeaseDuration || o.RenewPeriod >= o.RenewDeadline {
		return fmt.Errorf("shard: want renew period (%s) < renew deadline (%s) < lease duration (%s)", o.RenewPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	if o.Identity == "" || o.Group == "" || o.Namespace == "" {
		return fmt.Errorf("shard: identity, group and namespace are required")
	}
	return nil
}

// LeaseName is the name of a member's Lease.
func LeaseName(identity string) string { return LeasePrefix + identity }

// Work is what a member does with one assignment until ctx ends (the
// assignment changed, or the member stops); an error ends Run.
type Work func(ctx context.Context, a Assignment) error

// observed is when a Lease's renewal was last seen to move, on this clock.
type observed struct {
	renew string
	at    time.Time
	dur   time.Duration
}

// member is the state of Run.
type member struct {
	o       Options
	log     logr.Logger
	metrics *metrics

	mu sync.Mutex
	// leases is the informer's store of the members' Leases.
	leases    cache.Store
	seen      map[string]observed
	lastRenew time.Time // of our own Lease, on this clock; zero before the first
	changed   chan struct{}
	// own is this replica's Lease as last written (renewLoop's only).
	own *coordinationv1.Lease
	// pods are the verdicts on the other members' Pods, by identity; self
	// this replica's Pod's labels; ignored the Lease versions told of
	// (verify.go).
	pods    map[string]podVerdict
	self    map[string]string
	ignored map[string]bool
	// ctx is Run's: the Pod reads (readPod) run on it, counted by reads,
	// which Run waits for.
	ctx   context.Context
	reads sync.WaitGroup
}

// Run holds this replica's membership Lease and runs work with each
// assignment it sees, one at a time: work's context ends when the view
// changes, and the next starts once the last has returned (fenced). When ctx
// ends the Lease is deleted, once work has returned, so that the others
// take its namespaces at once.
func Run(ctx context.Context, o Options, work Work) error {
	if err := o.defaults(); err != nil {
		return err
	}
	m := &member{o: o, log: logr.FromContextOrDiscard(ctx).WithName("shard"),
		seen: map[string]observed{}, changed: make(chan struct{}, 1), pods: map[string]podVerdict{}, ignored: map[string]bool{}, ctx: ctx}
	m.metrics = newMetrics(o.Registry)
	informer := m.watchLeases(ctx)
	m.leases = informer.GetStore()
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); informer.RunWithContext(ctx) }()
	go func() { defer bg.Done(); m.renewLoop(ctx) }()
	err := m.loop(ctx, informer.HasSynced, work)
	bg.Wait()
	m.reads.Wait()
	m.leave()
	return err
}

func (m *member) poke() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// watchLeases keeps the members' Leases (by their label) in the informer's
// store, which view reads; each change wakes the loop.
func (m *member) watchLeases(ctx context.Context) cache.SharedIndexInformer {
	leases := m.o.Client.CoordinationV1().Leases(m.o.Namespace)
	selector := LabelMember + "=" + m.o.Group
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return leases.Watch(ctx, opts)
		},
	}
	// A fake clientset in tests cannot stream a watch-list: the wrapper tells the reflector.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, m.o.Client), &coordinationv1.Lease{}, 0, cache.Indexers{})
	poke := func(any) { m.poke() }
	_, _ = inf.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{ // the registration is never removed: the informer lives as long as Run
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { m.poke() },
		DeleteFunc: poke,
	}, cache.HandlerOptions{Logger: &m.log})
	return inf
}

// renewLoop creates and renews this replica's Lease every RenewPeriod.
func (m *member) renewLoop(ctx context.Context) {
	t := m.o.Clock.NewTicker(m.o.RenewPeriod)
	defer t.Stop()
	for {
		if err := m.renew(ctx); err != nil && ctx.Err() == nil {
			m.log.Error(err, "renewing the membership Lease failed", "lease", LeaseName(m.o.Identity))
			m.metrics.renewFailures.Inc()
		}
		m.poke()
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (m *member) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.RenewPeriod)
	defer cancel()
	leases := m.o.Client.CoordinationV1().Leases(m.o.Namespace)
	now := metav1.NewMicroTime(m.o.Clock.Now())
	name := LeaseName(m.o.Identity)
	// The Lease as last written: renewing it takes one update, and a read
	// only when that fails (a conflict, or the first renewal).
	l := m.own
	if l == nil {
		got, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = nil
		case err != nil:
			return err
		default:
			l = got
		}
	}
	var err error
	if l == nil {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.o.Namespace, Labels: map[string]string{LabelMember: m.o.Group}, OwnerReferences: m.owners()},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(m.o.Identity), LeaseDurationSeconds: ptr.To(int32(m.o.LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}
		l, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		l = l.DeepCopy()
		l.Spec.RenewTime = &now
		l.Spec.HolderIdentity = ptr.To(m.o.Identity)
		l.Spec.LeaseDurationSeconds = ptr.To(int32(m.o.LeaseDuration / time.Second))
		if l.Labels[LabelMember] != m.o.Group {
			l.Labels = map[string]string{LabelMember: m.o.Group}
		}
		if m.o.Owner != nil && !slices.ContainsFunc(l.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == m.o.Owner.UID }) {
			l.OwnerReferences = m.owners() // a Lease of the same name, left by an earlier Pod
		}
		l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		m.own = nil // read it again next time
		return err
	}
	m.own = l
	m.mu.Lock()
	m.lastRenew = m.o.Clock.Now()
	m.mu.Unlock()
	return nil
}

// owners are the membership Lease's owner references.
func (m *member) owners() []metav1.OwnerReference {
	if m.o.Owner == nil {
		return nil
	}
	return []metav1.OwnerReference{*m.o.Owner}
}

// leave deletes this replica's Lease: the others take its namespaces
// without waiting for it to expire. Work has stopped by then.
func (m *member) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // Run's context has ended: leaving gets a bound of its own
	defer cancel()
	err := m.o.Client.CoordinationV1().Leases(m.o.Namespace).Delete(ctx, LeaseName(m.o.Identity), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		m.log.Error(err, "deleting the membership Lease failed; the others take this replica's namespaces once it expires")
	}
}

// view computes the live members now. Self is live while its last renewal
// is within the renew deadline; another while its renew time moved within
// its Lease's duration, as observed here.
func (m *member) view() Assignment {
	now := m.o.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var members []string
	listed := map[string]bool{}
	for _, obj := range m.leases.List() {
		l, ok := obj.(*coordinationv1.Lease)
		var id string
		var dur time.Duration
		if ok {
			id, dur, ok = MemberLease(l, m.o.LeaseDuration)
		}
		if !ok || id == m.o.Identity {
			continue
		}
		listed[id] = true
		if ok, reason := m.vet(l, id); !ok {
			if reason != "" {
				m.ignoreLease(l, reason)
			}
			continue
		}
		renew := ""
		if l.Spec.RenewTime != nil {
			renew = l.Spec.RenewTime.String() + "/" + l.ResourceVersion
		}
		s, ok := m.seen[id]
		if !ok || s.renew != renew {
			s = observed{renew: renew, at: now, dur: dur}
			m.seen[id] = s
		}
		if now.Sub(s.at) < s.dur {
			members = append(members, id)
		}
	}
	for id := range m.seen {
		if !listed[id] {
			delete(m.seen, id) // its Lease went
		}
	}
	for id, v := range m.pods {
		if !listed[id] && !v.pending {
			delete(m.pods, id)
		}
	}
	a := Assignment{}
	if !m.lastRenew.IsZero() && now.Sub(m.lastRenew) < m.o.RenewDeadline {
		a.Self = m.o.Identity
		members = append(members, m.o.Identity)
	}
	if a.Self == "" {
		return a
	}
	slices.Sort(members)
	a.Members = members
	return a
}

// MemberLease reads a membership Lease as every member (and `tally
// shards`) reads it: its holder's identity, and how long a renewal keeps
// it a member (its leaseDurationSeconds, else def). ok is false for a
// Lease that names no holder or is not named after its holder (LeaseName):
// it makes nobody a member.
func MemberLease(l *coordinationv1.Lease, def time.Duration) (identity string, duration time.Duration, ok bool) {
	identity = ptr.Deref(l.Spec.HolderIdentity, "")
	if identity == "" || l.Name != LeaseName(identity) {
		return "", 0, false
	}
	duration = def
	if s := l.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		duration = time.Duration(*s) * time.Second
	}
	return identity, duration, true
}

// loop runs work with each new view. A member that has just joined (or
// come back after losing its Lease) waits a Lease duration from then: the
// others have seen its Lease by then, and stopped writing what it takes.
func (m *member) loop(ctx context.Context, leasesSynced func() bool, work Work) error {
	tick := m.o.Clock.NewTicker(time.Second)
	defer tick.Stop()
	var current Assignment
	var running *working
	var joined time.Time              // when Self last became a member
	defer func() { running.stop() }() // ctx ended: work's error does not matter any more
	for {
		var done <-chan error
		if running != nil {
			done = running.done
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			running.cancel()
			running = nil
			if ctx.Err() != nil {
				return nil // the work saw ctx end first: it was told to stop
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("shard: work returned before its assignment changed")
		case <-m.changed:
		case <-tick.C():
		}
		if !leasesSynced() {
			continue
		}
		a := m.view()
		m.metrics.members.Set(float64(len(a.Members)))
		if a.Self == "" {
			joined = time.Time{}
		} else if joined.IsZero() {
			joined = m.o.Clock.Now()
		}
		if !a.Equal(current) && running != nil {
			m.log.Info("the members changed: stopping work on the old assignment", "was", current.String(), "now", a.String())
			err := running.stop()
			running = nil
			if err != nil {
				return err
			}
			m.metrics.changes.Inc()
		}
		current = a
		if a.Self == "" {
			m.metrics.member.Set(0)
			continue
		}
		m.metrics.member.Set(1)
		if running != nil || m.o.Clock.Since(joined) < m.o.LeaseDuration {
			continue // working already, or the others may not have seen this member yet: the next tick looks again
		}
		m.log.Info("working on an assignment", "assignment", a.String())
		running = start(ctx, work, a)
	}
}

// working is one assignment's work.
type working struct {
	cancel context.CancelFunc
	done   chan error
}

func start(ctx context.Context, work Work, a Assignment) *working {
	ctx, cancel := context.WithCancel(ctx)
	w := &working{cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- work(ctx, a) }()
	return w
}

// stop ends the work and waits for it (nil: none running).
func (w *working) stop() error {
	if w == nil {
		return nil
	}
	w.cancel()
	return <-w.done
}

type metrics struct {
	members, member prometheus.Gauge
	changes         prometheus.Counter
	renewFailures   prometheus.Counter
	ignored         prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_shard_members",
			Help: "Live scanner pairs sharing the namespaces, as this replica sees them (itself included)."}),
		member: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_shard_member",
			Help: "1 while this replica's membership Lease is renewed within the renew deadline (it works on its shard), else 0."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_shard_handovers_total",
			Help: "Changes of the members seen while working: each stops the work on the old shard and starts it on the new one."}),
		renewFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_shard_renew_failures_total",
			Help: "Renewals of this replica's membership Lease that failed."}),
	}
	m.ignored = prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_shard_members_ignored_total",
		Help: "Membership Leases that do not count (a duration other than the configured one, not owned by a live Pod of tally's), once per Lease version."})
	reg.MustRegister(m.members, m.member, m.changes, m.renewFailures, m.ignored)
	return m
}
