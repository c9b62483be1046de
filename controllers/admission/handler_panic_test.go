package admission

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/tally-dev/tally/engine"
)

func TestAPanickingPolicyIsAnsweredPerItsFailurePolicyAndTheOthersAreEvaluated(t *testing.T) {
	real := evaluatePolicy
	defer func() { evaluatePolicy = real }()
	evaluatePolicy = func(p *engine.Policy, ctx context.Context, req *engine.Request) []engine.RuleResult {
		if strings.HasPrefix(p.Name, "boom") {
			var m map[string]int
			m["x"]++ // a real runtime panic
		}
		return real(p, ctx, req)
	}
	tests := map[string]struct {
		policies    []string
		allowed     bool
		mustName    []string
		mustNotName string
	}{
		"failurePolicy Fail denies, naming the policy, and the other policy still reports": {
			policies: []string{slowPolicy("boom-fail", "Enforce", "Fail"), policyYAML("other", "Enforce", "")},
			allowed:  false, mustName: []string{"boom-fail:\n  evaluation panicked (failurePolicy Fail)", "other:\n  require-team"},
		},
		"failurePolicy Ignore admits with a warning": {
			policies: []string{slowPolicy("boom-ignore", "Enforce", "Ignore"), policyYAML("other", "Audit", "")},
			allowed:  true, mustName: []string{"policy boom-ignore: not evaluated: evaluation panicked"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := testBridge(t, tc.policies...)
			obj := pod(map[string]string{"secret-label": "s3cr3t"})
			resp, err := b.Review(context.Background(), request(admissionv1.Create, obj))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			text := strings.Join(resp.Warnings, "\n")
			if resp.Result != nil {
				text += resp.Result.Message
			}
			for _, s := range tc.mustName {
				if !strings.Contains(text, s) {
					t.Errorf("answer %q does not contain %q", text, s)
				}
			}
			if strings.Contains(text, "s3cr3t") || strings.Contains(text, "nil map") {
				t.Errorf("answer %q carries the panic's value or the object's content", text)
			}
			if n := testutil.ToFloat64(b.metrics.evalPanics); n != 1 {
				t.Errorf("%s = %v, want 1", metricEvalPanics, n)
			}
			if got := pendingResults(b); len(got) != 0 {
				t.Errorf("a partly evaluated request recorded %v", got)
			}
		})
	}
}

func TestAFullPoolAnswersAsATimeout(t *testing.T) {
	b := testBridge(t, slowPolicy("fail-closed", "Enforce", "Fail"), slowPolicy("fail-open", "Enforce", "Ignore"))
	b.pool = newEvalPool(0, 0) // nothing free
	resp, err := b.Review(context.Background(), request(admissionv1.Create, pod(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Allowed || !strings.Contains(resp.Result.Message, "fail-closed:\n  evaluation refused") {
		t.Fatalf("allowed %v, %+v: want fail-closed to deny as on a timeout", resp.Allowed, resp.Result)
	}
	if n := testutil.ToFloat64(b.metrics.evalRefused); n != 1 {
		t.Errorf("%s = %v, want 1", metricEvalRefused, n)
	}
}

// countingReader counts the bytes read of a body.
type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) {
	c.n += len(p)
	return 0, io.EOF
}

// Issue 39: the webhook bounds before it works: with as many reviews in
// hand as the pool can evaluate, one more is answered at once (429, the
// webhook's failurePolicy applies) without a byte of it read.
func TestReviewsAreBoundedBeforeTheyAreRead(t *testing.T) {
	b := testBridge(t)
	for range cap(b.decoding) {
		b.decoding <- struct{}{}
	}
	body := &countingReader{}
	w := httptest.NewRecorder()
	b.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate", body))
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("status %d, want 429", w.Code)
	}
	if body.n != 0 {
		t.Errorf("%d bytes of the body were read", body.n)
	}
	if n := testutil.ToFloat64(b.metrics.evalRefused); n != 1 {
		t.Errorf("%s = %v, want 1", metricEvalRefused, n)
	}
	<-b.decoding // a slot frees: the next review is read and answered
	w = httptest.NewRecorder()
	b.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader("{}")))
	if w.Code != http.StatusBadRequest {
		t.Errorf("status %d with a free slot, want 400 for an empty review", w.Code)
	}
}
