package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

func TestMembersShareNamespacesAndHandThemOverFenced(t *testing.T) {
	kube := fake.NewClientset()
	rec := &recorder{seen: map[string][]Assignment{}, live: map[string]Assignment{}}
	opts := func(id string) Options {
		return Options{Client: kube, Namespace: "tally-system", Group: "tally-scanner", Identity: id,
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
	start := time.Now()
	waitFor(t, "a works alone", func() bool { a, ok := rec.running()["a"]; return ok && len(a.Members) == 1 })
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("a started working %s after joining: a new member waits a Lease duration (2s)", d)
	}
	bCtx, bStop := context.WithCancel(ctx)
	bDone := run(bCtx, "b")
	waitFor(t, "a and b work on the same two-member view", func() bool {
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
	// b leaves: its Lease is deleted, and a takes everything at once.
	bStop()
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	waitFor(t, "a works alone again", func() bool { a, ok := rec.running()["a"]; return ok && len(a.Members) == 1 })
	if d := time.Since(left); d > 1500*time.Millisecond {
		t.Errorf("a took b's namespaces %s after b left; a member that leaves deletes its Lease, so no wait is needed", d)
	}
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
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
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
	rec := &recorder{seen: map[string][]Assignment{}, live: map[string]Assignment{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Client: kube, Namespace: "tally-system", Group: "tally-scanner", Identity: "a",
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RenewPeriod: 200 * time.Millisecond}, rec.work)
	}()
	waitFor(t, "a works", func() bool { _, ok := rec.running()["a"]; return ok })
	failing.Store(true)
	cut := time.Now()
	waitFor(t, "a stops", func() bool { _, ok := rec.running()["a"]; return !ok })
	if d := time.Since(cut); d > 2*time.Second {
		t.Errorf("a stopped %s after its renewals began to fail; the renew deadline is 1s, the Lease's duration 2s", d)
	}
	failing.Store(false)
	waitFor(t, "a works again, once renewed", func() bool { _, ok := rec.running()["a"]; return ok })
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
