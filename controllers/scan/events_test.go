package scan

import (
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/memstore"
)

func result(policy, rule, res, msg string) memstore.Result {
	return memstore.NewResult(memstore.Entry{Policy: policy, Rule: rule, Result: res, Message: msg, Source: "kyverno"}, time.Unix(1, 0))
}

func celResult(source, policy, res string) memstore.Result {
	return memstore.NewResult(memstore.Entry{Policy: policy, Result: res, Source: source}, time.Unix(1, 0))
}

func TestResultEventsOnlyOnTransitions(t *testing.T) {
	failing := result("require-labels", "pods", "fail", "label team is required")
	pass := func(policy, rule string) memstore.Result { return result(policy, rule, "pass", "ok") }
	tests := map[string]struct {
		before, after []memstore.Result
		success       bool
		want          []string
	}{
		"a new failing result is a violation": {
			after: []memstore.Result{failing},
			want:  []string{"require-labels/pods fail"},
		},
		"a result that stays failing emits nothing, even with another message": {
			before: []memstore.Result{failing},
			after:  []memstore.Result{result("require-labels", "pods", "fail", "another message")},
		},
		"a pass emits nothing without success events": {
			before: []memstore.Result{failing},
			after:  []memstore.Result{pass("require-labels", "pods")},
		},
		"a policy whose results became passes is applied, once": {
			before:  []memstore.Result{failing},
			after:   []memstore.Result{pass("require-labels", "pods"), pass("require-labels", "other")},
			success: true,
			want:    []string{"require-labels applied"},
		},
		"a policy with a pass beside a failure is not applied": {
			after:   []memstore.Result{pass("p", "a"), result("p", "b", "fail", "m")},
			success: true,
			want:    []string{"p/b fail"},
		},
		"a pass that stays a pass emits nothing": {
			before:  []memstore.Result{pass("p", "r")},
			after:   []memstore.Result{pass("p", "r")},
			success: true,
		},
		"warn and error are violations": {
			after: []memstore.Result{result("p", "w", "warn", "m"), result("p", "e", "error", "boom")},
			want:  []string{"p/w warn", "p/e error"},
		},
		"skips emit nothing": {
			before:  []memstore.Result{failing},
			after:   []memstore.Result{result("require-labels", "pods", "skip", "excluded")},
			success: true,
		},
		"only the rule that changed has an event": {
			before: []memstore.Result{failing, pass("p", "r")},
			after:  []memstore.Result{failing, result("p", "r", "fail", "bad")},
			want:   []string{"p/r fail"},
		},
		// A MutatingPolicy named as a failing ValidatingPolicy: both have
		// no rule, and are told apart by source.
		"a policy of another kind with the same name has its own event": {
			before: []memstore.Result{celResult(engine.SourceValidatingPolicy, "same", "fail")},
			after:  []memstore.Result{celResult(engine.SourceValidatingPolicy, "same", "fail"), celResult(engine.SourceMutatingPolicy, "same", "fail")},
			want:   []string{"same/ fail"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, ev := range resultEvents(tc.before, tc.after, tc.success) {
				if ev.applied {
					got = append(got, ev.entry.Policy+" applied")
				} else {
					got = append(got, ev.entry.Policy+"/"+ev.entry.Rule+" "+ev.entry.Result)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestEventNames(t *testing.T) {
	for _, tc := range []struct {
		entry memstore.Entry
		key   string
		short string
	}{
		{memstore.Entry{Source: "kyverno", Policy: "require-labels"}, "require-labels", "require-labels"},
		{memstore.Entry{Source: "kyverno", Policy: "team-a/require-labels"}, "team-a/require-labels", "require-labels"},
		{memstore.Entry{Source: engine.SourceValidatingPolicy, Policy: "vp"}, "ValidatingPolicy/vp", "vp"},
		{memstore.Entry{Source: engine.SourceValidatingPolicy, Policy: "team-a/nvp"}, "NamespacedValidatingPolicy/team-a/nvp", "nvp"},
		{memstore.Entry{Source: engine.SourceValidatingAdmissionPolicy, Policy: "vap"}, "ValidatingAdmissionPolicy/vap", "vap"},
		{memstore.Entry{Source: engine.SourceMutatingPolicy, Policy: "mp"}, "MutatingPolicy/mp", "mp"},
		{memstore.Entry{Source: engine.SourceMutatingPolicy, Policy: "team-a/nmp"}, "NamespacedMutatingPolicy/team-a/nmp", "nmp"},
		{memstore.Entry{Source: engine.SourceMutatingAdmissionPolicy, Policy: "map"}, "MutatingAdmissionPolicy/map", "map"},
	} {
		if got := policyKeyOf(tc.entry); got != tc.key {
			t.Errorf("policyKeyOf(%v) = %q, want %q", tc.entry, got, tc.key)
		}
		if got := shortName(tc.entry.Policy); got != tc.short {
			t.Errorf("shortName(%q) = %q, want %q", tc.entry.Policy, got, tc.short)
		}
	}
}
