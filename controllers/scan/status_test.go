package scan

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json" // numbers as int64, as the API server's objects hold them

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
)

// conditionsOf applies a ReadyPatch's status to a policy and returns its
// conditions by type ("status reason message") and its ready field.
func conditionsOf(t *testing.T, u *unstructured.Unstructured, patch []byte) (map[string]string, bool) {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		t.Fatal(err)
	}
	status := p["status"].(map[string]any)
	if cs, ok := status["conditionStatus"].(map[string]any); ok {
		status = cs
	}
	out := map[string]string{}
	for _, c := range status["conditions"].([]any) {
		m := c.(map[string]any)
		out[m["type"].(string)] = m["status"].(string) + " " + m["reason"].(string) + " " + m["message"].(string)
	}
	u.Object["status"] = p["status"]
	return out, status["ready"].(bool)
}

func TestCELPoliciesGetKyvernosConditions(t *testing.T) {
	vpol := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
			"metadata": map[string]any{"name": "p", "generation": int64(2), "resourceVersion": "9"},
		}}
	}
	tests := map[string]struct {
		admission bool
		forbidden error
		want      map[string]string
		ready     bool
	}{
		"loaded, every kind readable": {admission: true, ready: true, want: map[string]string{
			"Ready":                  "True Succeeded evaluated",
			"WebhookConfigured":      "True Succeeded Webhook configured.",
			"RBACPermissionsGranted": "True Succeeded Policy is ready for reporting.",
		}},
		"background only: no webhook condition": {want: map[string]string{
			"Ready":                  "True Succeeded evaluated",
			"RBACPermissionsGranted": "True Succeeded Policy is ready for reporting.",
		}, ready: true},
		"a kind it may not list": {admission: true, forbidden: errors.New("forbidden: secrets"), want: map[string]string{
			"Ready":                  "True Succeeded evaluated",
			"WebhookConfigured":      "True Succeeded Webhook configured.",
			"RBACPermissionsGranted": "False Failed Policy is not ready for reporting, missing permissions: forbidden: secrets.",
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u := vpol()
			patch, changed := ReadyPatch(u, statusTime, nil, "evaluated", CELConditions(tc.admission, tc.forbidden)...)
			if !changed {
				t.Fatal("nothing to record on a policy without status")
			}
			got, ready := conditionsOf(t, u, patch)
			if len(got) != len(tc.want) {
				t.Errorf("conditions = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			if ready != tc.ready {
				t.Errorf("ready = %v, want %v", ready, tc.ready)
			}
			if _, again := ReadyPatch(u, statusTime, nil, "evaluated", CELConditions(tc.admission, tc.forbidden)...); again {
				t.Error("the same status is written again")
			}
			patch, changed = ReadyPatch(u, statusTime, errors.New("does not compile"), "evaluated")
			if !changed {
				t.Fatal("a rejection changes nothing")
			}
			got, ready = conditionsOf(t, u, patch)
			if got["Ready"] != "False PolicyRejected does not compile" || ready {
				t.Errorf("rejected: conditions = %v, ready = %v", got, ready)
			}
		})
	}
}

// R46: a policy whose rules tally leaves out says so; one it evaluates
// nothing of is not Ready.
func TestRulesLeftOutAreNamedInTheStatus(t *testing.T) {
	compile := func(rules string) *engine.Policy {
		t.Helper()
		var spec kyvernov1.Spec
		if err := json.Unmarshal([]byte(`{"rules":`+rules+`}`), &spec); err != nil {
			t.Fatal(err)
		}
		p, err := engine.CompileClusterPolicy(&kyvernov1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const (
		validate = `{"name":"v","match":{"any":[{"resources":{"kinds":["ConfigMap"]}}]},"validate":{"message":"m","pattern":{"data":{"a":"?*"}}}}`
		images   = `{"name":"signed","match":{"any":[{"resources":{"kinds":["Pod"]}}]},"verifyImages":[{"imageReferences":["*"]}]}`
		mutate   = `{"name":"add-label","match":{"any":[{"resources":{"kinds":["Pod"]}}]},"mutate":{"patchStrategicMerge":{"metadata":{"labels":{"a":"b"}}}}}`
	)
	tests := map[string]struct {
		rules, ready string
	}{
		"validate only": {"[" + validate + "]", "True Succeeded the policy is evaluated by tally"},
		"validate and mutate": {"[" + validate + "," + mutate + "]",
			"True Succeeded the policy is evaluated by tally, but for rule add-label (mutate): reported by Kyverno's controllers beside Kyverno; not evaluated by tally"},
		"verifyImages and mutate: the images are verified (R41)": {"[" + images + "," + mutate + "]",
			"True Succeeded the policy is evaluated by tally, but for rule add-label (mutate): reported by Kyverno's controllers beside Kyverno; not evaluated by tally"},
		"mutate only": {"[" + mutate + "]",
			"False NotEvaluated tally evaluates none of this policy's rules: rule add-label (mutate) is reported by Kyverno's controllers beside Kyverno; not evaluated by tally"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(tc.rules)
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
				"metadata": map[string]any{"name": "p", "generation": int64(1), "resourceVersion": "3"}}}
			patch, _ := ReadyPatch(u, statusTime, leftOutError(p), loadedMessage(p))
			got, ready := conditionsOf(t, u, patch)
			if got["Ready"] != tc.ready {
				t.Errorf("Ready = %q\nwant    %q", got["Ready"], tc.ready)
			}
			if ready != strings.HasPrefix(tc.ready, "True") {
				t.Errorf("ready = %v", ready)
			}
		})
	}
}

// statusTime is when the status tests write conditions.
var statusTime = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
