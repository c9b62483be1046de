package podsecurity

import (
	"encoding/json"
	"strings"
	"testing"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

const (
	hardened = `{"kind":"Pod","metadata":{"name":"p"},"spec":{"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}},
	  "containers":[{"name":"c","image":"nginx:1.27","securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}`
	privileged = `{"kind":"Pod","metadata":{"name":"p"},"spec":{"hostNetwork":true,
	  "containers":[{"name":"c","image":"nginx:1.27","securityContext":{"privileged":true}},{"name":"d","image":"busybox:1","securityContext":{"capabilities":{"add":["NET_ADMIN"]}}}]}}`
	capsOnly = `{"kind":"Pod","metadata":{"name":"p"},"spec":{
	  "containers":[{"name":"d","image":"busybox:1","securityContext":{"capabilities":{"add":["NET_ADMIN"]}}}]}}`
	deployment = `{"kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"metadata":{},"spec":{"hostPID":true,
	  "containers":[{"name":"c","image":"nginx:1.27"}]}}}}`
	cronjob = `{"kind":"CronJob","metadata":{"name":"j"},"spec":{"jobTemplate":{"spec":{"template":{"spec":{
	  "containers":[{"name":"c","image":"nginx:1.27"}]}}}}}}`
)

func TestEvaluate(t *testing.T) {
	tests := map[string]struct {
		rule      kyvernov1.PodSecurity
		resource  string
		wantPass  bool
		wantCheck string // an ID among the failures
	}{
		"a hardened pod meets restricted":          {rule: kyvernov1.PodSecurity{Level: "restricted", Version: "latest"}, resource: hardened, wantPass: true},
		"privileged level lets anything pass":      {rule: kyvernov1.PodSecurity{Level: "privileged"}, resource: privileged, wantPass: true},
		"a privileged container violates baseline": {rule: kyvernov1.PodSecurity{Level: "baseline", Version: "latest"}, resource: privileged, wantCheck: "privileged"},
		"host network violates baseline":           {rule: kyvernov1.PodSecurity{Level: "baseline", Version: "latest"}, resource: privileged, wantCheck: "hostNamespaces"},
		"added capabilities violate baseline":      {rule: kyvernov1.PodSecurity{Level: "baseline", Version: "v1.29"}, resource: capsOnly, wantCheck: "capabilities_baseline"},
		"an excluded control by image passes": {
			rule: kyvernov1.PodSecurity{Level: "baseline", Version: "latest", Exclude: []kyvernov1.PodSecurityStandard{
				{ControlName: "Capabilities", Images: []string{"busybox*"}}}},
			resource: capsOnly, wantPass: true,
		},
		"an exclusion for another image does not apply": {
			rule: kyvernov1.PodSecurity{Level: "baseline", Version: "latest", Exclude: []kyvernov1.PodSecurityStandard{
				{ControlName: "Capabilities", Images: []string{"nginx*"}}}},
			resource: capsOnly, wantCheck: "capabilities_baseline",
		},
		"an exclusion of allowed values passes": {
			rule: kyvernov1.PodSecurity{Level: "baseline", Version: "latest", Exclude: []kyvernov1.PodSecurityStandard{
				{ControlName: "Capabilities", Images: []string{"*"}, RestrictedField: "spec.containers[*].securityContext.capabilities.add", Values: []string{"NET_ADMIN"}}}},
			resource: capsOnly, wantPass: true,
		},
		"a deployment's template is checked": {rule: kyvernov1.PodSecurity{Level: "baseline", Version: "latest"}, resource: deployment, wantCheck: "hostNamespaces"},
		"a cronjob's template is checked":    {rule: kyvernov1.PodSecurity{Level: "restricted", Version: "latest"}, resource: cronjob, wantCheck: "runAsNonRoot"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := obj(t, tc.resource)
			got, err := Evaluate(tc.rule, o["kind"].(string), o)
			if err != nil {
				t.Fatal(err)
			}
			if got.Pass != tc.wantPass {
				t.Fatalf("pass = %v, want %v (%s)", got.Pass, tc.wantPass, got.Message)
			}
			if tc.wantCheck == "" {
				return
			}
			found := false
			for _, c := range got.Checks {
				found = found || c.ID == tc.wantCheck
			}
			if !found || !strings.Contains(got.Message, "It violates PodSecurity") {
				t.Errorf("failures %+v lack %s, or message %q is not Kyverno's", got.Checks, tc.wantCheck, got.Message)
			}
		})
	}
}

func TestCompileRejectsBadRules(t *testing.T) {
	for name, rule := range map[string]kyvernov1.PodSecurity{
		"an unknown level":   {Level: "strict"},
		"a bad version":      {Level: "baseline", Version: "one"},
		"an unknown control": {Level: "baseline", Exclude: []kyvernov1.PodSecurityStandard{{ControlName: "Nope"}}},
	} {
		if _, err := Compile(rule); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
