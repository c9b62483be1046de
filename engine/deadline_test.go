package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
)

// countdown is a context whose deadline passes after n checks of Err.
type countdown struct {
	context.Context
	n int
}

func (c *countdown) Err() error {
	if c.n <= 0 {
		return context.DeadlineExceeded
	}
	c.n--
	return nil
}

func TestEvaluationHonoursItsDeadline(t *testing.T) {
	twoRules := `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: a
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
  - name: b
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`
	foreach := `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: each
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      foreach:
      - list: request.object.spec.containers
        pattern: {name: "?*"}
`
	tests := map[string]struct {
		policy string
		ctx    func() (context.Context, context.CancelFunc)
		want   map[string]string // rule -> result
	}{
		"a deadline already passed leaves every matched rule an error": {
			policy: twoRules,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithDeadline(context.Background(), time.Unix(1, 0))
			},
			want: map[string]string{"a": "error", "b": "error"},
		},
		"a deadline that passes after the first rule stops the second": {
			policy: twoRules,
			ctx:    func() (context.Context, context.CancelFunc) { return &countdown{context.Background(), 1}, func() {} },
			want:   map[string]string{"a": "pass", "b": "error"},
		},
		"a deadline that passes between foreach elements stops the foreach": {
			policy: foreach,
			ctx:    func() (context.Context, context.CancelFunc) { return &countdown{context.Background(), 2}, func() {} },
			want:   map[string]string{"each": "error"},
		},
		"without a deadline the foreach passes": {
			policy: foreach,
			ctx:    func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
			want:   map[string]string{"each": "pass"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			got := map[string]string{}
			for _, r := range compile(t, tc.policy).Evaluate(ctx, &engine.Request{Object: resource(t, labelledPod), Background: true}) {
				if strings.HasPrefix(r.Rule, "autogen-") {
					continue
				}
				got[r.Rule] = string(r.Result)
				if r.Result == engine.Error && !strings.Contains(r.Message, "deadline") {
					t.Errorf("rule %s: message %q does not say the deadline stopped it", r.Rule, r.Message)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for rule, want := range tc.want {
				if got[rule] != want {
					t.Errorf("rule %s: got %s, want %s", rule, got[rule], want)
				}
			}
		})
	}
}
