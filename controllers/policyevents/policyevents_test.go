package policyevents

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

// captured is what one Eventf call was given.
type captured struct {
	regarding, related              string
	eventType, reason, action, note string
}

type recorder struct{ got []captured }

func name(o runtime.Object) string {
	if o == nil {
		return "-"
	}
	r := o.(*corev1.ObjectReference)
	return r.Kind + ":" + r.Name
}

func (r *recorder) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	r.got = append(r.got, captured{name(regarding), name(related), eventType, reason, action, fmt.Sprintf(note, args...)})
}

var (
	pod    = &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "team-a", Name: "web"}
	node   = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "n1"}
	policy = &corev1.ObjectReference{APIVersion: "kyverno.io/v1", Kind: "ClusterPolicy", Name: "require-labels"}
)

func TestShapes(t *testing.T) {
	fail := Result{Policy: policy, PolicyName: "require-labels", Rule: "check-team", Status: "fail", Message: "label team is required"}
	tests := map[string]struct {
		run  func(*Emitter)
		want []captured
	}{
		"a violation is told on the policy and on the resource": {
			run: func(e *Emitter) { e.Violation(pod, fail, false) },
			want: []captured{
				{"ClusterPolicy:require-labels", "Pod:web", "Warning", "PolicyViolation", "Resource Passed", "Pod team-a/web: [check-team] fail; label team is required"},
				{"Pod:web", "ClusterPolicy:require-labels", "Warning", "PolicyViolation", "Resource Passed", "policy require-labels/check-team fail: label team is required"},
			},
		},
		"a blocked request is told on the policy only": {
			run: func(e *Emitter) { e.Violation(pod, fail, true) },
			want: []captured{
				{"ClusterPolicy:require-labels", "Pod:web", "Warning", "PolicyViolation", "Resource Blocked", "Pod team-a/web: [check-team] fail (blocked); label team is required"},
			},
		},
		"a cluster-scoped resource is named without a namespace": {
			run: func(e *Emitter) {
				e.Violation(node, Result{Policy: policy, PolicyName: "p", Rule: "r", Status: "error"}, false)
			},
			want: []captured{
				{"ClusterPolicy:require-labels", "Node:n1", "Warning", "PolicyViolation", "Resource Passed", "Node n1: [r] error"},
				{"Node:n1", "ClusterPolicy:require-labels", "Warning", "PolicyViolation", "Resource Passed", "policy p/r error: "},
			},
		},
		"a policy no longer known still tells the resource": {
			run: func(e *Emitter) {
				e.Violation(pod, Result{PolicyName: "gone", Rule: "r", Status: "fail", Message: "m"}, false)
			},
			want: []captured{{"Pod:web", "-", "Warning", "PolicyViolation", "Resource Passed", "policy gone/r fail: m"}},
		},
		"a resource without a name yet gets no Event": {
			run: func(e *Emitter) {
				e.Violation(&corev1.ObjectReference{Kind: "Pod", Namespace: "team-a"}, fail, false)
			},
			want: []captured{{"ClusterPolicy:require-labels", "Pod:", "Warning", "PolicyViolation", "Resource Passed", "Pod team-a/: [check-team] fail; label team is required"}},
		},
		"applied needs success events": {
			run: func(e *Emitter) { e.Applied(pod, policy) },
		},
		"applied is told on the policy": {
			run:  func(e *Emitter) { e.Success = true; e.Applied(pod, policy) },
			want: []captured{{"ClusterPolicy:require-labels", "Pod:web", "Normal", "PolicyApplied", "Resource Passed", "Pod team-a/web: pass"}},
		},
		"omitted reasons are not recorded": {
			run: func(e *Emitter) {
				e.Success, e.Omit = true, map[string]bool{ReasonViolation: true, ReasonApplied: true}
				e.Violation(pod, fail, false)
				e.Applied(pod, policy)
			},
		},
	}
	for n, tc := range tests {
		t.Run(n, func(t *testing.T) {
			rec := &recorder{}
			tc.run(&Emitter{Recorder: rec})
			if fmt.Sprint(rec.got) != fmt.Sprint(tc.want) {
				t.Errorf("events:\n got %q\nwant %q", rec.got, tc.want)
			}
		})
	}
}

func TestNilEmitterRecordsNothing(t *testing.T) {
	var e *Emitter
	e.Violation(pod, Result{}, false)
	e.Applied(pod, policy)
	(&Emitter{}).Violation(pod, Result{Policy: policy}, false)
}

func TestNotesAreBounded(t *testing.T) {
	rec := &recorder{}
	(&Emitter{Recorder: rec}).Violation(pod, Result{Policy: policy, PolicyName: "p", Rule: "r", Status: "fail", Message: strings.Repeat("é", 2000)}, false)
	for _, c := range rec.got {
		if len(c.note) > maxNote || !strings.HasSuffix(c.note, "...") {
			t.Errorf("note of %d bytes: %q...", len(c.note), c.note[:40])
		}
		if strings.ToValidUTF8(c.note, "\uFFFD") != c.note {
			t.Errorf("note cut inside a character")
		}
	}
}

func TestParseOmit(t *testing.T) {
	got, err := ParseOmit("PolicyApplied, PolicySkipped,")
	if err != nil || !got[ReasonApplied] || !got["PolicySkipped"] || got[ReasonViolation] {
		t.Errorf("ParseOmit = %v, %v", got, err)
	}
	if _, err := ParseOmit("PolicyApplid"); err == nil || !strings.Contains(err.Error(), `"PolicyApplid"`) {
		t.Errorf("a misspelt reason: %v", err)
	}
}

func TestStatusOf(t *testing.T) {
	for result, want := range map[string]string{"fail": "fail true", "warn": "fail true", "error": "error true", "pass": "pass false", "skip": "skip false"} {
		status, violation := StatusOf(wgv1alpha2.Result(result))
		if got := fmt.Sprint(status, " ", violation); got != want {
			t.Errorf("StatusOf(%s) = %s, want %s (a report's warn is an engine fail)", result, got, want)
		}
	}
}
