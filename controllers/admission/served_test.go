package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestServedRetriesOutagesButNotAbsentKinds(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{{
		GroupVersion: GVRAdmissionReport.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: GVRAdmissionReport.Resource}},
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
	// EphemeralReports are not served: left out, not retried for ever.
	got := served(ctx, disc, GVRAdmissionReport, GVREphemeralReport)
	if len(got) != 1 || got[0] != GVRAdmissionReport {
		t.Fatalf("served = %v, want only %v", got, GVRAdmissionReport)
	}
	if outages != 0 {
		t.Errorf("%d outages left: the errors were not retried", outages)
	}
}
