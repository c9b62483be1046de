package scan

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/memstore"
)

func result(policy, rule, res, msg string) memstore.Result {
	return memstore.NewResult(memstore.Entry{Policy: policy, Rule: rule, Result: res, Message: msg}, time.Unix(1, 0))
}

func TestResultEventsOnlyOnTransitions(t *testing.T) {
	failing := result("require-labels", "pods", "fail", "validation error: label team is required. rule pods failed at path /metadata/labels/team/")
	tests := map[string]struct {
		before, after []memstore.Result
		success       bool
		want          []string
	}{
		"a new failing result is a violation": {
			after: []memstore.Result{failing},
			want:  []string{"Warning PolicyViolation policy require-labels/pods fail: validation error: label team is required. rule pods failed at path /metadata/labels/team/"},
		},
		"a result that stays failing emits nothing, even with another message": {
			before: []memstore.Result{failing},
			after:  []memstore.Result{result("require-labels", "pods", "fail", "another message")},
		},
		"a pass emits nothing without success events": {
			before: []memstore.Result{failing},
			after:  []memstore.Result{result("require-labels", "pods", "pass", "validation rule 'pods' passed.")},
		},
		"a pass emits a success event with them": {
			before:  []memstore.Result{failing},
			after:   []memstore.Result{result("require-labels", "pods", "pass", "validation rule 'pods' passed.")},
			success: true,
			want:    []string{"Normal PolicyApplied policy require-labels/pods pass: validation rule 'pods' passed."},
		},
		"a pass that stays a pass emits nothing": {
			before:  []memstore.Result{result("p", "r", "pass", "ok")},
			after:   []memstore.Result{result("p", "r", "pass", "ok")},
			success: true,
		},
		"warn and error are violations; warn is named fail, as Kyverno's engine result": {
			after: []memstore.Result{result("p", "w", "warn", "m"), result("p", "e", "error", "boom")},
			want:  []string{"Warning PolicyViolation policy p/w fail: m", "Warning PolicyViolation policy p/e error: boom"},
		},
		"skips emit nothing": {
			before:  []memstore.Result{failing},
			after:   []memstore.Result{result("require-labels", "pods", "skip", "excluded")},
			success: true,
		},
		"a namespaced Policy is named by its name alone": {
			after: []memstore.Result{result("team-a/require-labels", "pods", "fail", "m")},
			want:  []string{"Warning PolicyViolation policy require-labels/pods fail: m"},
		},
		"only the rule that changed has an event": {
			before: []memstore.Result{failing, result("p", "r", "pass", "ok")},
			after:  []memstore.Result{failing, result("p", "r", "fail", "bad")},
			want:   []string{"Warning PolicyViolation policy p/r fail: bad"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, ev := range resultEvents(tc.before, tc.after, tc.success) {
				got = append(got, ev.eventType+" "+ev.reason+" "+ev.message)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestEventMessagesAreBounded(t *testing.T) {
	evs := resultEvents(nil, []memstore.Result{result("p", "r", "fail", strings.Repeat("x", 5000))}, false)
	if len(evs) != 1 || len(evs[0].message) != maxEventMessage || !strings.HasSuffix(evs[0].message, "...") {
		t.Errorf("message of %d bytes", len(evs[0].message))
	}
}
