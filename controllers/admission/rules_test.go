package admission

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryfake "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
)

func fakeDiscovery() *discoveryfake.FakeDiscovery {
	return &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Kind: "Pod"}, {Name: "pods/status", Kind: "Pod"}, {Name: "pods/exec", Kind: "PodExecOptions"},
			{Name: "secrets", Kind: "Secret"}, {Name: "configmaps", Kind: "ConfigMap"}, {Name: "namespaces", Kind: "Namespace"},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment"}, {Name: "deployments/scale", Kind: "Scale"}}},
		{GroupVersion: "coordination.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "leases", Kind: "Lease"}}},
	}}}
}

func TestWebhookRulesNameOnlyWhatPoliciesMatch(t *testing.T) {
	tests := map[string]struct {
		kinds   []string
		want    string
		missing string
	}{
		"no policy: only policy writes":       {kinds: nil, want: "[[kyverno.io] [clusterpolicies policies]]"},
		"Pods: the pods resource only":        {kinds: []string{"Pod"}, want: "[[] [pods]] [[kyverno.io] [clusterpolicies policies]]"},
		"a subresource is named":              {kinds: []string{"Pod/exec"}, want: "[[] [pods/exec]] [[kyverno.io] [clusterpolicies policies]]"},
		"kinds of several groups":             {kinds: []string{"Deployment", "ConfigMap", "Pod"}, want: "[[] [configmaps pods]] [[apps] [deployments]] [[kyverno.io] [clusterpolicies policies]]"},
		"a group-qualified kind":              {kinds: []string{"apps/v1/Deployment"}, want: "[[apps] [deployments]] [[kyverno.io] [clusterpolicies policies]]"},
		"a kind not served is left out":       {kinds: []string{"Widget"}, want: "[[kyverno.io] [clusterpolicies policies]]", missing: "Widget"},
		"every kind: everything":              {kinds: []string{"Pod", "*"}, want: "[[*] [* */*]]"},
		"a kind wildcard matches by its name": {kinds: []string{"Config*"}, want: "[[] [configmaps]] [[kyverno.io] [clusterpolicies policies]]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rules, missing, err := webhookRules(tc.kinds, fakeDiscovery())
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for i, r := range rules {
				if i > 0 {
					got += " "
				}
				got += fmt.Sprint([][]string{r.APIGroups, r.Resources})
				if fmt.Sprint(r.Operations) != "[CREATE UPDATE]" {
					t.Errorf("operations %v, want CREATE and UPDATE only", r.Operations)
				}
			}
			if got != tc.want {
				t.Errorf("rules = %s, want %s", got, tc.want)
			}
			if got := strings.Join(missing, ","); got != tc.missing {
				t.Errorf("missing = %q, want %q", got, tc.missing)
			}
		})
	}
}
