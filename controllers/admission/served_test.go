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

	"github.com/tally-dev/tally/api/apiresources"
)

func TestServedRetriesOutagesButNotAbsentKinds(t *testing.T) {
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
	// EphemeralReports are not served: left out, not retried for ever.
	got := served(ctx, disc, apiresources.AdmissionReport, apiresources.EphemeralReport)
	if len(got) != 1 || got[0] != apiresources.AdmissionReport {
		t.Fatalf("served = %v, want only %v", got, apiresources.AdmissionReport)
	}
	if outages != 0 {
		t.Errorf("%d outages left: the errors were not retried", outages)
	}
}
