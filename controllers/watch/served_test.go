package watch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tally-dev/tally/api/apiresources"
)

func TestServedNowRetriesOutagesButNotAbsentKinds(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{{
		GroupVersion: apiresources.AdmissionReport.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: apiresources.AdmissionReport.Resource}},
	}}
	outages := 2
	disc.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		if outages > 0 {
			outages--
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Now())
	done := make(chan []schema.GroupVersionResource)
	go func() {
		// EphemeralReports are not served: left out, not retried for ever.
		done <- ServedNow(ctx, disc, clk, apiresources.AdmissionReport, apiresources.EphemeralReport)
	}()
	var got []schema.GroupVersionResource
	for got == nil {
		select {
		case got = <-done:
		case <-time.After(time.Millisecond):
			clk.Step(ServedRetryMax) // each retry waits on the clock
		}
	}
	if len(got) != 1 || got[0] != apiresources.AdmissionReport {
		t.Fatalf("served = %v, want only %v", got, apiresources.AdmissionReport)
	}
	if outages != 0 {
		t.Errorf("%d outages left: the errors were not retried", outages)
	}
}

// A kind served after the start (its CRD established later) is found on
// the clock's schedule, once; FollowServed returns when every kind was.
func TestFollowServedFindsKindsServedLater(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	var mu sync.Mutex
	serve := func(gvrs ...schema.GroupVersionResource) {
		mu.Lock()
		defer mu.Unlock()
	next:
		for _, gvr := range gvrs {
			for _, l := range disc.Resources {
				if l.GroupVersion == gvr.GroupVersion().String() {
					l.APIResources = append(l.APIResources, metav1.APIResource{Name: gvr.Resource})
					continue next
				}
			}
			disc.Resources = append(disc.Resources, &metav1.APIResourceList{
				GroupVersion: gvr.GroupVersion().String(),
				APIResources: []metav1.APIResource{{Name: gvr.Resource}},
			})
		}
	}
	clk := clocktesting.NewFakeClock(time.Now())
	found := make(chan schema.GroupVersionResource, 4)
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer close(done)
		FollowServed(ctx, lockedDiscovery{disc, &mu}, clk, []schema.GroupVersionResource{apiresources.ValidatingPolicy, apiresources.ImageValidatingPolicy}, func(gvr schema.GroupVersionResource) { found <- gvr })
	}()
	waiting := func() { // until FollowServed waits on the clock
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return clk.HasWaiters(), nil
		}); err != nil {
			t.Fatal("FollowServed never waited on its clock")
		}
	}
	step := func() {
		waiting()
		clk.Step(ServedRetryMax)
	}
	step()
	// The look after that step is over once FollowServed waits again: no
	// kind was found in it (a found kind is sent before it waits).
	waiting()
	if len(found) != 0 {
		t.Fatalf("%v found before it was served", <-found)
	}
	serve(apiresources.ValidatingPolicy)
	step()
	if gvr := <-found; gvr != apiresources.ValidatingPolicy {
		t.Fatalf("found %v, want %v", gvr, apiresources.ValidatingPolicy)
	}
	serve(apiresources.ImageValidatingPolicy)
	step()
	if gvr := <-found; gvr != apiresources.ImageValidatingPolicy {
		t.Fatalf("found %v, want %v", gvr, apiresources.ImageValidatingPolicy)
	}
	<-done // every kind found: FollowServed returned without ctx ending
	if len(found) != 0 {
		t.Fatalf("a kind was found twice: %v", <-found)
	}
}

// lockedDiscovery serves discovery while the test may change what it serves.
type lockedDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu *sync.Mutex
}

func (d lockedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.FakeDiscovery.ServerResourcesForGroupVersion(gv)
}
