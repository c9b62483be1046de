package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func namespaces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("team-%d", i)
	}
	return out
}

func TestOwnerSpreadsNamespacesEvenly(t *testing.T) {
	members := []string{"tally-scanner-7d9f-abcde", "tally-scanner-7d9f-fghij", "tally-scanner-7d9f-klmno"}
	count := map[string]int{}
	for _, ns := range namespaces(3000) {
		count[Owner(members, ns)]++
	}
	for _, m := range members {
		if count[m] < 850 || count[m] > 1150 {
			t.Errorf("%s owns %d of 3000 namespaces, want about 1000: %v", m, count[m], count)
		}
	}
}

func TestAJoiningMemberTakesOnlyFromTheOthersAndALeavingOneGivesOnlyItsOwn(t *testing.T) {
	before := []string{"a", "b", "c"}
	after := []string{"a", "b", "c", "d"}
	moved := 0
	for _, ns := range namespaces(2000) {
		was, is := Owner(before, ns), Owner(after, ns)
		if was != is {
			moved++
			if is != "d" {
				t.Fatalf("namespace %s moved from %s to %s when d joined: only d may gain", ns, was, is)
			}
		}
		// d leaving again gives back exactly what it took.
		if Owner(after[:3], ns) != was {
			t.Fatalf("namespace %s: d leaving did not give it back to %s", ns, was)
		}
	}
	if moved < 350 || moved > 650 {
		t.Errorf("%d of 2000 namespaces moved to the fourth member, want about 500", moved)
	}
	if Owner(nil, "x") != "" {
		t.Errorf("no member owns anything")
	}
}

// recorder keeps each member's assignments as its work saw them.
type recorder struct {
	mu   sync.Mutex
	seen map[string][]Assignment
	live map[string]Assignment // work running now, by member
	// doubles are the namespaces two members' work owned at once.
	doubles []string
}

func (r *recorder) work(ctx context.Context, a Assignment) error {
	r.mu.Lock()
	r.seen[a.Self] = append(r.seen[a.Self], a)
	for other, b := range r.live {
		for _, ns := range namespaces(200) {
			if a.Owns(ns) && b.Owns(ns) {
				r.doubles = append(r.doubles, fmt.Sprintf("%s and %s both own %s (%s; %s)", a.Self, other, ns, a, b))
			}
		}
	}
	r.live[a.Self] = a
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	delete(r.live, a.Self)
	r.mu.Unlock()
	return nil
}

func (r *recorder) running() map[string]Assignment {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Assignment{}
	for k, v := range r.live {
		out[k] = v
	}
	return out
}

// fakeStart is where the tests' fake clocks start.
var fakeStart = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

// stepUntil moves the fake clock on in steps of 50 ms, giving the members a
// moment of real time after each, until cond holds; it fails the test when
// the clock would pass limit (from its start) first. No bound is on real
// time but a generous one against a hang.
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if clk.Since(fakeStart) >= limit {
			t.Fatalf("%s: not by %s on the clock", what, limit)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the members did not move in 30s of real time", what)
		}
		clk.Step(50 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
}

// stepFor moves the fake clock on to at (from its start), as stepUntil
// does, failing the test as soon as never holds.
func stepFor(t *testing.T, clk *clocktesting.FakeClock, at time.Duration, what string, never func() bool) {
	t.Helper()
	for clk.Since(fakeStart) < at {
		if never() {
			t.Fatalf("%s, at %s on the clock", what, clk.Since(fakeStart))
		}
		clk.Step(50 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMembersShareNamespacesAndHandThemOverFenced(t *testing.T) {
	kube := fake.NewClientset()
	clk := clocktesting.NewFakeClock(fakeStart)
	rec := &recorder{seen: map[string][]Assignment{}, live: map[string]Assignment{}}
	opts := func(id string) Options {
		return Options{Client: kube, Namespace: "tally-system", Group: "tally-scanner", Identity: id, Clock: clk,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RenewPeriod: 200 * time.Millisecond}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(ctx context.Context, id string) chan error {
		done := make(chan error, 1)
		go func() { done <- Run(logr.NewContext(ctx, testr.New(t)), opts(id), rec.work) }()
		return done
	}
	aDone := run(ctx, "a")
	waitFor(t, "a's Lease", func() bool {
		_, err := kube.CoordinationV1().Leases("tally-system").Get(ctx, LeaseName("a"), metav1.GetOptions{})
		return err == nil
	})
	working := func(id string) func() bool {
		return func() bool { _, ok := rec.running()[id]; return ok }
	}
	// A new member waits a Lease duration (2 s) from joining.
	stepFor(t, clk, 1500*time.Millisecond, "a started working before a Lease duration had passed since it joined", working("a"))
	stepUntil(t, clk, 4*time.Second, "a works alone", func() bool { a, ok := rec.running()["a"]; return ok && len(a.Members) == 1 })
	bCtx, bStop := context.WithCancel(ctx)
	bDone := run(bCtx, "b")
	stepUntil(t, clk, 10*time.Second, "a and b work on the same two-member view", func() bool {
		r := rec.running()
		return len(r["a"].Members) == 2 && len(r["b"].Members) == 2
	})
	// Fenced: b never worked while a's work still held the one-member view.
	rec.mu.Lock()
	if len(rec.doubles) > 0 {
		t.Errorf("owned twice at once: %v", rec.doubles[:1])
	}
	if len(rec.seen["a"]) != 2 {
		t.Errorf("a worked on %d assignments, want 2 (alone, then with b)", len(rec.seen["a"]))
	}
	rec.mu.Unlock()
	// b leaves: its Lease is deleted, and a takes everything at once,
	// with the clock standing still.
	bStop()
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a works alone again, the clock not moved", func() bool { a, ok := rec.running()["a"]; return ok && len(a.Members) == 1 })
	if _, err := kube.CoordinationV1().Leases("tally-system").Get(ctx, LeaseName("b"), metav1.GetOptions{}); err == nil {
		t.Errorf("b's Lease is still there after b stopped")
	}
	cancel()
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out waiting until %s", what)
	}
}

// A member that cannot renew its Lease (the API server unreachable for it)
// stops working within the renew deadline, before the others would take
// its namespaces (a Lease duration after its last renewal).
func TestAMemberThatCannotRenewStopsWithinTheRenewDeadline(t *testing.T) {
	kube := fake.NewClientset()
	var failing atomic.Bool
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("the API server is unreachable")
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(fakeStart)
	rec := &recorder{seen: map[string][]Assignment{}, live: map[string]Assignment{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Client: kube, Namespace: "tally-system", Group: "tally-scanner", Identity: "a", Clock: clk,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RenewPeriod: 200 * time.Millisecond}, rec.work)
	}()
	working := func() bool { _, ok := rec.running()["a"]; return ok }
	stepUntil(t, clk, 5*time.Second, "a works", working)
	failing.Store(true)
	cut := clk.Since(fakeStart)
	// Renewed at most a renew period (0.2 s) before the cut: it works on
	// for a while, and has stopped once the renew deadline (1 s) has passed
	// since, well before its Lease's duration (2 s) would let the others
	// take its namespaces.
	stepFor(t, clk, cut+700*time.Millisecond, "a stopped before its renew deadline", func() bool { return !working() })
	stepUntil(t, clk, cut+1500*time.Millisecond, "a stops within its renew deadline and before its Lease expires", func() bool { return !working() })
	failing.Store(false)
	stepUntil(t, clk, cut+10*time.Second, "a works again, once renewed", working)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The membership Lease is owned by the replica's Pod (Options.Owner), so
// the garbage collector deletes it with the Pod; a Lease of the same name
// left by an earlier Pod is taken over with the new owner.
func TestTheMembershipLeaseIsOwnedByThePod(t *testing.T) {
	kube := fake.NewClientset()
	pod := func(uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "a", UID: types.UID(uid)}
	}
	ownedBy := func(uid string) bool {
		l, err := kube.CoordinationV1().Leases("tally-system").Get(context.Background(), LeaseName("a"), metav1.GetOptions{})
		return err == nil && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == types.UID(uid) && l.OwnerReferences[0].Kind == "Pod"
	}
	run := func(uid string) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Options{Client: kube, Namespace: "tally-system", Group: "tally-scanner", Identity: "a", Owner: pod(uid),
				LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RenewPeriod: 100 * time.Millisecond},
				func(ctx context.Context, _ Assignment) error { <-ctx.Done(); return nil })
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
	stop := run("first")
	waitFor(t, "the first Pod owns the Lease", func() bool { return ownedBy("first") })
	stop()
	// A Pod killed without warning leaves its Lease; the next Pod of the
	// same name (a StatefulSet's) owns it from its first renewal.
	_, err := kube.CoordinationV1().Leases("tally-system").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName("a"), Namespace: "tally-system", Labels: map[string]string{LabelMember: "tally-scanner"},
			OwnerReferences: []metav1.OwnerReference{*pod("first")}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop = run("second")
	waitFor(t, "the second Pod owns the Lease left by the first", func() bool { return ownedBy("second") })
	stop()
}

// Issue 39: a forged membership Lease (a duration of 68 years, no owner, an
// owner that is not a live Pod of tally's) takes no namespace: ignored,
// counted, told in an Event; a Lease of a Pod of tally's counts.
func TestOnlyLeasesOfTallysPodsCount(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/name": "tally", "app.kubernetes.io/instance": "tally", "app.kubernetes.io/component": "scanner"}
	newPod := func(name, uid string, l map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tally-system", UID: types.UID(uid), Labels: l}}
	}
	kube := fake.NewClientset(newPod("a", "uid-a", labels), newPod("b", "uid-b", labels),
		newPod("stranger", "uid-s", map[string]string{"app.kubernetes.io/name": "other"}))
	lease := func(id string, seconds int32, owner *metav1.OwnerReference) {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName(id), Namespace: "tally-system", Labels: map[string]string{LabelMember: "tally-scanner"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), LeaseDurationSeconds: ptr.To(seconds), RenewTime: ptr.To(metav1.NowMicro())},
		}
		if owner != nil {
			l.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if _, err := kube.CoordinationV1().Leases("tally-system").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podRef := func(name, uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid)}
	}
	lease("ghost", 2147483647, podRef("ghost", "uid-g"))   // a duration of its own
	lease("orphan", 2, nil)                                // no owner
	lease("stranger", 2, podRef("stranger", "uid-s"))      // a Pod that is not tally's
	lease("impostor", 2, podRef("impostor", "uid-nobody")) // a Pod that does not exist
	lease("b", 2, podRef("b", "uid-b"))                    // a replica of tally's
	// b renews its Lease, as a live replica does.
	renewing, stopRenewing := context.WithCancel(context.Background())
	defer stopRenewing()
	go func() {
		for renewing.Err() == nil {
			if l, err := kube.CoordinationV1().Leases("tally-system").Get(renewing, LeaseName("b"), metav1.GetOptions{}); err == nil {
				l.Spec.RenewTime = ptr.To(metav1.NowMicro())
				_, _ = kube.CoordinationV1().Leases("tally-system").Update(renewing, l, metav1.UpdateOptions{}) // the next renewal tries again
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	rec := &recorder{seen: map[string][]Assignment{}, live: map[string]Assignment{}}
	events := record.NewFakeRecorder(20)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(logr.NewContext(ctx, testr.New(t)), Options{Client: kube, Namespace: "tally-system", Group: "tally-scanner", Identity: "a",
			Owner: podRef("a", "uid-a"), Recorder: events, Registry: reg,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RenewPeriod: 200 * time.Millisecond}, rec.work)
	}()
	waitFor(t, "a works with b alone", func() bool {
		a, ok := rec.running()["a"]
		return ok && len(a.Members) == 2 && a.Members[0] == "a" && a.Members[1] == "b"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, reg, "tally_shard_members_ignored_total"); n < 4 {
		t.Errorf("ignored %v Leases, want the 4 forged ones", n)
	}
	got := ""
	for len(events.Events) > 0 {
		got += <-events.Events + "\n"
	}
	for _, want := range []string{"its duration is not the configured 2s", "it is not owned by the Pod of its holder",
		"its Pod is not one of tally's", "its Pod does not exist"} {
		if !strings.Contains(got, want) {
			t.Errorf("no Event says %q; Events:\n%s", want, got)
		}
	}
}

// counterValue reads a registered counter by name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// A membership Lease is read one way by the members and by `tally
// shards`: named after its holder, its duration when positive.
func TestMemberLease(t *testing.T) {
	lease := func(name, holder string, seconds int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		l.Spec.LeaseDurationSeconds = &seconds
		return l
	}
	for _, c := range []struct {
		name    string
		lease   *coordinationv1.Lease
		id      string
		dur     time.Duration
		isValid bool
	}{
		{"its own", lease(LeaseName("a"), "a", 20), "a", 20 * time.Second, true},
		{"no duration: the default", lease(LeaseName("a"), "a", 0), "a", DefaultLeaseDuration, true},
		{"named after another", lease(LeaseName("b"), "a", 20), "", 0, false},
		{"no holder", lease(LeaseName("a"), "", 20), "", 0, false},
	} {
		id, dur, ok := MemberLease(c.lease, DefaultLeaseDuration)
		if id != c.id || dur != c.dur || ok != c.isValid {
			t.Errorf("%s: got %q %v %v, want %q %v %v", c.name, id, dur, ok, c.id, c.dur, c.isValid)
		}
	}
}
