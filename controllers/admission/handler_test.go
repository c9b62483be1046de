package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/report"
)

// policyYAML builds a ClusterPolicy requiring label "team" on Pods.
func policyYAML(name, action, extra string) string {
	return `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: ` + name + `
  resourceVersion: "7"
spec:
  validationFailureAction: ` + action + `
` + extra + `
  rules:
  - name: require-team
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: label team is required
      pattern:
        metadata:
          labels:
            team: "?*"
`
}

func testBridge(t *testing.T, policies ...string) *Bridge {
	t.Helper()
	b := New(nil, nil, nil, Options{Timeout: 2 * time.Second, MaxRequestBytes: 64 << 10})
	for _, p := range policies {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(p), &obj); err != nil {
			t.Fatal(err)
		}
		gvr := apiresources.ClusterPolicy
		if obj["kind"] == "Policy" {
			gvr = apiresources.Policy
		}
		b.policies.Upsert(context.Background(), gvr, &unstructured.Unstructured{Object: obj})
	}
	b.policies.Upsert(context.Background(), apiresources.Namespace, &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "prod", "labels": map[string]any{"env": "prod"}}}})
	return b
}

func pod(labels map[string]string) map[string]any {
	md := map[string]any{"name": "p", "namespace": "prod", "uid": "uid-1"}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		md["labels"] = l
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md,
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}
}

func request(op admissionv1.Operation, obj map[string]any) *admissionv1.AdmissionRequest {
	raw, _ := json.Marshal(obj)
	return &admissionv1.AdmissionRequest{
		UID: types.UID("req-1"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "prod", Name: "p",
		Operation: op, Object: runtime.RawExtension{Raw: raw},
	}
}

func pendingResults(b *Bridge) map[string]string {
	out := map[string]string{}
	b.recorder.mu.Lock()
	defer b.recorder.mu.Unlock()
	for _, e := range b.recorder.pending {
		for _, r := range e.results {
			out[e.uid+" "+r.Policy+"/"+r.Rule] = string(r.Result)
		}
	}
	return out
}

func TestReview(t *testing.T) {
	audit := policyYAML("audit-team", "Audit", "  emitWarning: true")
	auditQuiet := policyYAML("audit-quiet", "Audit", "")
	enforce := policyYAML("enforce-team", "Enforce", "")
	ruleEnforce := strings.Replace(policyYAML("rule-enforce", "Audit", ""), "      message: label", "      failureAction: Enforce\n      message: label", 1)
	overrideProd := policyYAML("override-prod", "Audit", `  validationFailureActionOverrides:
  - action: Enforce
    namespaceSelector:
      matchLabels: {env: prod}`)
	admissionOff := policyYAML("admission-off", "Enforce", "  admission: false")
	// Kyverno sets webhookConfiguration.matchConditions on the webhook it
	// registers for the policy: requests they exclude never reach it.
	conditioned := policyYAML("conditioned", "Enforce", `  webhookConfiguration:
    matchConditions:
    - name: not-skipped
      expression: "object.metadata.?labels.?skip.orValue('') != 'yes'"`)
	conditionErr := policyYAML("conditioned-err", "Audit", `  failurePolicy: Ignore
  webhookConfiguration:
    matchConditions:
    - name: broken-at-runtime
      expression: "object.metadata.labels.missing == 'x'"`)
	tests := map[string]struct {
		policies     []string
		req          func() *admissionv1.AdmissionRequest
		allowed      bool
		messageHas   []string
		warnings     int
		wantRecorded map[string]string
	}{
		"a request the policy's webhook match conditions exclude never reaches it": {
			policies: []string{conditioned}, req: func() *admissionv1.AdmissionRequest {
				return request(admissionv1.Create, pod(map[string]string{"skip": "yes"}))
			},
			allowed: true, wantRecorded: map[string]string{},
		},
		"a request the webhook match conditions include is evaluated": {
			policies: []string{conditioned}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Create, pod(nil)) },
			allowed: false, messageHas: []string{"conditioned"}, wantRecorded: map[string]string{},
		},
		"a match condition that errs skips a policy with failurePolicy Ignore": {
			policies: []string{conditionErr}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Create, pod(nil)) },
			allowed: true, wantRecorded: map[string]string{},
		},
		"an Audit failure of a policy without emitWarning is admitted without warning and recorded": {
			policies: []string{auditQuiet}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Create, pod(nil)) },
			allowed: true, warnings: 0, wantRecorded: map[string]string{"uid-1 audit-quiet/require-team": "fail"},
		},
		"an Audit failure of a policy with emitWarning is admitted with one warning and recorded": {
			policies: []string{audit}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Create, pod(nil)) },
			allowed: true, warnings: 1, wantRecorded: map[string]string{"uid-1 audit-team/require-team": "fail"},
		},
		"an Enforce failure is denied naming the policy and rule, and records nothing (R11)": {
			policies: []string{audit, enforce}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Create, pod(nil)) },
			allowed: false, messageHas: []string{"enforce-team:", "require-team: validation error: label team is required"},
			wantRecorded: map[string]string{},
		},
		"a passing Enforce rule is recorded (R07)": {
			policies: []string{enforce}, req: func() *admissionv1.AdmissionRequest {
				return request(admissionv1.Create, pod(map[string]string{"team": "a"}))
			},
			allowed: true, wantRecorded: map[string]string{"uid-1 enforce-team/require-team": "pass"},
		},
		"a rule-level failureAction Enforce overrides the policy's Audit (R12)": {
			policies: []string{ruleEnforce}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Update, pod(nil)) },
			allowed: false, messageHas: []string{"rule-enforce:"}, wantRecorded: map[string]string{},
		},
		"a namespace override turns Audit into Enforce (R12)": {
			policies: []string{overrideProd}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Create, pod(nil)) },
			allowed: false, messageHas: []string{"override-prod:"}, wantRecorded: map[string]string{},
		},
		"DELETE is admitted without evaluation (R13)": {
			policies: []string{enforce}, req: func() *admissionv1.AdmissionRequest {
				r := request(admissionv1.Delete, nil)
				raw, _ := json.Marshal(pod(nil))
				r.OldObject = runtime.RawExtension{Raw: raw}
				return r
			},
			allowed: true, wantRecorded: map[string]string{},
		},
		"a dry run is answered but records nothing (R13)": {
			policies: []string{audit}, req: func() *admissionv1.AdmissionRequest {
				r := request(admissionv1.Create, pod(nil))
				r.DryRun = ptr.To(true)
				return r
			},
			allowed: true, warnings: 1, wantRecorded: map[string]string{},
		},
		"an Event is admitted and records nothing (R13)": {
			policies: []string{enforce}, req: func() *admissionv1.AdmissionRequest {
				r := request(admissionv1.Create, map[string]any{"apiVersion": "v1", "kind": "Event", "metadata": map[string]any{"name": "e", "namespace": "prod", "uid": "u"}})
				r.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "Event"}
				return r
			},
			allowed: true, wantRecorded: map[string]string{},
		},
		"pods/exec is admitted and records nothing (R13)": {
			policies: []string{enforce}, req: func() *admissionv1.AdmissionRequest {
				r := request(admissionv1.Connect, map[string]any{"apiVersion": "v1", "kind": "PodExecOptions"})
				r.SubResource = "exec"
				return r
			},
			allowed: true, wantRecorded: map[string]string{},
		},
		"a policy with admission off neither denies nor records (R13)": {
			policies: []string{admissionOff}, req: func() *admissionv1.AdmissionRequest { return request(admissionv1.Create, pod(nil)) },
			allowed: true, wantRecorded: map[string]string{},
		},
		"a CREATE without a uid is answered but records nothing": {
			policies: []string{audit}, req: func() *admissionv1.AdmissionRequest {
				p := pod(nil)
				delete(p["metadata"].(map[string]any), "uid")
				return request(admissionv1.Create, p)
			},
			allowed: true, warnings: 1, wantRecorded: map[string]string{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := testBridge(t, tc.policies...)
			resp, err := b.Review(context.Background(), tc.req())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if resp.UID != "req-1" {
				t.Errorf("uid = %q", resp.UID)
			}
			for _, m := range tc.messageHas {
				if resp.Result == nil || !strings.Contains(resp.Result.Message, m) {
					t.Errorf("message %+v lacks %q", resp.Result, m)
				}
			}
			if len(resp.Warnings) != tc.warnings {
				t.Errorf("warnings = %q, want %d", resp.Warnings, tc.warnings)
			}
			got := pendingResults(b)
			if len(got) != len(tc.wantRecorded) {
				t.Fatalf("recorded %v, want %v", got, tc.wantRecorded)
			}
			for k, v := range tc.wantRecorded {
				if got[k] != v {
					t.Errorf("recorded %s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestRecordedEntryCarriesLabelsAndOwner(t *testing.T) {
	b := testBridge(t, policyYAML("audit-team", "Audit", ""))
	if _, err := b.Review(context.Background(), request(admissionv1.Create, pod(nil))); err != nil {
		t.Fatal(err)
	}
	e := b.recorder.pending["uid-1"]
	if e == nil {
		t.Fatal("nothing recorded")
	}
	if e.namespace != "prod" || report.GVRLabel(e.gvr) != "pods.v1" || e.hash == "" || e.owner.Kind != "Pod" || e.owner.UID != "uid-1" || e.owner.Name != "p" {
		t.Errorf("entry = %+v", e)
	}
	if e.policyLabels["cpol.kyverno.io/audit-team"] != "7" {
		t.Errorf("policy labels = %v", e.policyLabels)
	}
	if e.results[0].Properties["process"] != "admission review" {
		t.Errorf("properties = %v", e.results[0].Properties)
	}
}

// blockingLoader never returns before its context ends.
type blockingLoader struct{}

func (blockingLoader) Load(ctx context.Context, _ string, _ kyvernov1.ContextEntry, _ map[string]any) (any, error) {
	<-ctx.Done()
	// Work that goes on after the deadline (not a wait): the webhook's
	// answer must not wait for it.
	time.Sleep(50 * time.Millisecond)
	return nil, ctx.Err()
}

func slowPolicy(name, action, failurePolicy string) string {
	return `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: ` + name + `}
spec:
  validationFailureAction: ` + action + `
  failurePolicy: ` + failurePolicy + `
  rules:
  - name: slow
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: cm
      configMap: {name: settings, namespace: default}
    validate:
      message: never
      deny:
        conditions:
          any:
          - {key: "{{ cm.data.x }}", operator: Equals, value: "y"}
`
}

func TestTimeoutFollowsFailurePolicy(t *testing.T) {
	tests := map[string]struct {
		policy  string
		allowed bool
	}{
		"failurePolicy Fail denies":   {slowPolicy("slow-fail", "Enforce", "Fail"), false},
		"failurePolicy Ignore admits": {slowPolicy("slow-ignore", "Enforce", "Ignore"), true},
		"an Audit policy admits":      {slowPolicy("slow-audit", "Audit", "Fail"), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := testBridge(t, tc.policy)
			b.opts.Loader = blockingLoader{}
			b.opts.Timeout = 100 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
			defer cancel()
			// The loader blocks until the context ends: an answer at all
			// is the deadline's (its message says so below).
			resp, err := b.Review(ctx, request(admissionv1.Create, pod(nil)))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v, %q)", resp.Allowed, tc.allowed, resp.Result, resp.Warnings)
			}
			if !tc.allowed && !strings.Contains(resp.Result.Message, "did not finish within 100ms") {
				t.Errorf("message = %q", resp.Result.Message)
			}
			if got := pendingResults(b); len(got) != 0 {
				t.Errorf("a timed-out request recorded %v", got)
			}
		})
	}
}

func TestServeHTTP(t *testing.T) {
	b := testBridge(t, policyYAML("enforce-team", "Enforce", ""))
	review := func(req *admissionv1.AdmissionRequest) []byte {
		data, _ := json.Marshal(&admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
		return data
	}
	tests := map[string]struct {
		method, contentType string
		body                []byte
		status              int
		bodyHas             string
	}{
		"a denied review is answered 200 with allowed false": {body: review(request(admissionv1.Create, pod(nil))), status: 200, bodyHas: `"allowed":false`},
		"an allowed review is answered 200":                  {body: review(request(admissionv1.Create, pod(map[string]string{"team": "x"}))), status: 200, bodyHas: `"allowed":true`},
		"malformed JSON is a 400 naming the problem":         {body: []byte(`{"apiVersion":`), status: 400, bodyHas: "malformed AdmissionReview"},
		"an empty body is a 400":                             {body: nil, status: 400, bodyHas: "empty body"},
		"a wrong apiVersion is a 400":                        {body: []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`), status: 400, bodyHas: "expected apiVersion admission.k8s.io/v1"},
		"a review without request is a 400":                  {body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), status: 400, bodyHas: "has no request"},
		"a request without uid is a 400":                     {body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE","kind":{"version":"v1","kind":"Pod"}}}`), status: 400, bodyHas: "has no uid"},
		"an object that is not a JSON object is a 400":       {body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"version":"v1","kind":"Pod"},"object":[1,2]}}`), status: 400, bodyHas: "request.object is not a JSON object"},
		"an oversized body is a 413":                         {body: bytes.Repeat([]byte("x"), 70<<10), status: 413, bodyHas: "larger than the limit of 65536 bytes"},
		"GET is a 405":                                       {method: http.MethodGet, status: 405},
		"a non-JSON content type is a 415":                   {contentType: "application/yaml", body: []byte("a: b"), status: 415, bodyHas: "not supported"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			r := httptest.NewRequest(method, "/validate", bytes.NewReader(tc.body))
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			r.Header.Set("Content-Type", ct)
			w := httptest.NewRecorder()
			b.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status = %d, want %d: %s", w.Code, tc.status, w.Body.String())
			}
			if !strings.Contains(w.Body.String(), tc.bodyHas) {
				t.Errorf("body %q lacks %q", w.Body.String(), tc.bodyHas)
			}
		})
	}
}

// A policy the scanner refuses as malformed (a JMESPath that does not
// parse) is refused at admission too: both agree on which policies exist,
// and a stand-in for Kyverno's webhook marks it not Ready.
func TestMalformedPolicyIsRefusedAtAdmission(t *testing.T) {
	bad := strings.Replace(policyYAML("bad-pattern", "Enforce", ""), `team: "?*"`, `team: "{{ request.object.metadata.(( }}"`, 1)
	b := testBridge(t)
	var rejected error
	b.policies.onPolicy = func(_ schema.GroupVersionResource, _ *unstructured.Unstructured, err error) { rejected = err }
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(bad), &obj); err != nil {
		t.Fatal(err)
	}
	b.policies.Upsert(context.Background(), apiresources.ClusterPolicy, &unstructured.Unstructured{Object: obj})
	if rejected == nil {
		t.Error("the malformed policy was loaded")
	}
	if n := len(b.policies.current().policies); n != 0 {
		t.Errorf("%d policies evaluated at admission, want 0", n)
	}
	resp, err := b.Review(context.Background(), request(admissionv1.Create, pod(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed {
		t.Errorf("denied by a malformed policy: %v", resp.Result)
	}
}

func TestPolicyWritesAreCheckedAsKyvernoDoes(t *testing.T) {
	good := policyYAML("good", "Audit", "")
	tests := map[string]struct {
		policy     string
		kind       string
		sub        string
		op         admissionv1.Operation
		allowed    bool
		messageHas string
	}{
		"a valid policy is admitted": {policy: good, allowed: true},
		"a pattern operator without operand is admitted, as Kyverno admits it": {
			policy: strings.Replace(good, `team: "?*"`, `team: ">="`, 1), allowed: true},
		"a JMESPath that does not parse is refused": {
			policy: strings.Replace(good, `team: "?*"`, `team: "{{ request.object.metadata.(( }}"`, 1), messageHas: "policy good is invalid"},
		"admission-only data in a background policy is refused (R06)": {
			policy: strings.Replace(good, `team: "?*"`, `team: "{{ request.userInfo.username }}"`, 1), messageHas: "request.userInfo"},
		"admission and background both off is refused": {
			policy: policyYAML("good", "Audit", "  admission: false\n  background: false"), messageHas: "both false"},
		"a status update is not checked": {
			policy: strings.Replace(good, `team: "?*"`, `team: "{{ request.object.metadata.(( }}"`, 1), sub: "status", allowed: true},
		"a DELETE is not checked": {
			policy: strings.Replace(good, `team: "?*"`, `team: "{{ request.object.metadata.(( }}"`, 1), op: admissionv1.Delete, allowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := testBridge(t)
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.policy), &obj); err != nil {
				t.Fatal(err)
			}
			op := tc.op
			if op == "" {
				op = admissionv1.Create
			}
			req := request(op, obj)
			req.Kind = metav1.GroupVersionKind{Group: "kyverno.io", Version: "v1", Kind: "ClusterPolicy"}
			req.Name, req.SubResource = "good", tc.sub
			if op == admissionv1.Delete {
				req.OldObject, req.Object = req.Object, runtime.RawExtension{}
			}
			resp, err := b.Review(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if !tc.allowed && !strings.Contains(resp.Result.Message, tc.messageHas) {
				t.Errorf("message %q lacks %q", resp.Result.Message, tc.messageHas)
			}
		})
	}
}

// eventLog records what the bridge told through its Events.
type eventLog struct{ got []string }

func (l *eventLog) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	l.got = append(l.got, regarding.(*corev1.ObjectReference).Kind+" "+eventType+" "+reason+" ["+action+"] "+fmt.Sprintf(note, args...))
}

func TestReviewRecordsKyvernoEvents(t *testing.T) {
	const msg = "validation error: label team is required. rule require-team failed at path /metadata/labels/"
	tests := map[string]struct {
		action  string
		labels  map[string]string
		dryRun  bool
		success bool
		want    []string
	}{
		"an audited violation is told on the policy and the Pod": {
			action: "Audit",
			want: []string{
				"ClusterPolicy Warning PolicyViolation [Resource Passed] Pod prod/p: [require-team] fail; " + msg,
				"Pod Warning PolicyViolation [Resource Passed] policy ev/require-team fail: " + msg,
			},
		},
		"a blocked request is told on the policy": {
			action: "Enforce",
			want:   []string{"ClusterPolicy Warning PolicyViolation [Resource Blocked] Pod prod/p: [require-team] fail (blocked); " + msg},
		},
		"a pass is told only with success events": {
			action: "Audit", labels: map[string]string{"team": "a"},
		},
		"with success events, a policy that passed is applied": {
			action: "Enforce", labels: map[string]string{"team": "a"}, success: true,
			want: []string{"ClusterPolicy Normal PolicyApplied [Resource Passed] Pod prod/p: pass"},
		},
		"a dry run tells nothing": {
			action: "Audit", dryRun: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := testBridge(t, policyYAML("ev", tc.action, ""))
			log := &eventLog{}
			b.opts.Events = &policyevents.Emitter{Recorder: log, Success: tc.success}
			req := request(admissionv1.Create, pod(tc.labels))
			req.DryRun = &tc.dryRun
			if _, err := b.Review(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(log.got) != fmt.Sprint(tc.want) {
				t.Errorf("events:\n got %q\nwant %q", log.got, tc.want)
			}
		})
	}
}

// Results a background scan recomputes (policies with background on, on a
// kind the scanner reads) are left to it; what only admission can tell
// (background off) is written. A kind the scanner cannot read keeps all.
func TestResultsTheScanRecomputesAreNotWritten(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scanned bool
		want    map[string]string
	}{
		{"a kind the scanner reads", true, map[string]string{"uid-1 admission-only/require-team": "fail"}},
		{"a kind it cannot read", false, map[string]string{"uid-1 admission-only/require-team": "fail", "uid-1 both/require-team": "fail"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBridge(t, policyYAML("both", "Audit", ""), policyYAML("admission-only", "Audit", "  background: false"))
			var asked []string
			b.opts.Scanned = func(_ context.Context, gvr schema.GroupVersionResource) bool {
				asked = append(asked, gvr.Resource)
				return tc.scanned
			}
			if _, err := b.Review(context.Background(), request(admissionv1.Create, pod(nil))); err != nil {
				t.Fatal(err)
			}
			if got := pendingResults(b); !maps.Equal(got, tc.want) {
				t.Errorf("recorded %v, want %v", got, tc.want)
			}
			if fmt.Sprint(asked) != "[pods]" {
				t.Errorf("asked about %v, want [pods]", asked)
			}
		})
	}
}
