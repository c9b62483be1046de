package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/tally-dev/tally/controllers/policyevents"
	"github.com/tally-dev/tally/controllers/scan"
)

// resultEventsOf lists the Events of a reason about one object.
func resultEventsOf(ctx context.Context, t *testing.T, cfg *envconf.Config, obj k8s.Object, reason string) []corev1.Event {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg.Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	list, err := kube.CoreV1().Events(obj.GetNamespace()).List(ctx, metav1.ListOptions{
		FieldSelector: fmt.Sprintf("involvedObject.uid=%s,reason=%s", obj.GetUID(), reason),
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitForEvent waits until an object has an Event of a reason, and returns it.
func waitForEvent(ctx context.Context, t *testing.T, cfg *envconf.Config, obj k8s.Object, reason string) corev1.Event {
	t.Helper()
	var got []corev1.Event
	err := wait.For(func(ctx context.Context) (bool, error) {
		got = resultEventsOf(ctx, t, cfg, obj, reason)
		return len(got) > 0, nil
	}, wait.WithTimeout(60*time.Second), wait.WithInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("no %s Event on %s/%s", reason, obj.GetNamespace(), obj.GetName())
	}
	return got[0]
}

// waitForEventMatching waits until an object has an Event of a reason whose
// message starts with prefix, and returns it.
func waitForEventMatching(ctx context.Context, t *testing.T, cfg *envconf.Config, obj k8s.Object, reason, prefix string) corev1.Event {
	t.Helper()
	var found *corev1.Event
	err := wait.For(func(ctx context.Context) (bool, error) {
		for _, e := range resultEventsOf(ctx, t, cfg, obj, reason) {
			if strings.HasPrefix(e.Message, prefix) {
				found = &e
				return true, nil
			}
		}
		return false, nil
	}, wait.WithTimeout(60*time.Second), wait.WithInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("no %s Event %q... on %s", reason, prefix, obj.GetName())
	}
	return *found
}

// exactlyOnce fails unless an object has one Event of a reason, counted once
// (a repeat would be a second Event, or, folded by client-go's broadcaster
// as Kyverno's are, a count).
func exactlyOnce(ctx context.Context, t *testing.T, cfg *envconf.Config, obj k8s.Object, reason string) {
	t.Helper()
	got := resultEventsOf(ctx, t, cfg, obj, reason)
	if len(got) != 1 || got[0].Count > 1 {
		var desc []string
		for _, e := range got {
			desc = append(desc, fmt.Sprintf("%q x%d", e.Message, e.Count))
		}
		t.Errorf("%s/%s: %s Events %v, want exactly one", obj.GetNamespace(), obj.GetName(), reason, desc)
	}
}

// Background results give Events on the resource and on the policy as
// Kyverno's background scans do (a Warning PolicyViolation from kyverno-scan,
// through events.k8s.io/v1 with an action and an eventTime, naming policy and
// rule, or resource and rule), once per change of a result, never on a
// rescan that changes nothing; success Events (PolicyApplied, on the policy)
// only with --generate-success-events.
func TestScannerEmitsResultEvents(t *testing.T) {
	const ns = "events-a" // not scan-*: TestScannerWritesBackgroundReports counts what matches that
	var (
		scanner               *runningScanner
		merger                *runningMerger
		policy                = requireLabelsPolicy("events-require-labels", ns, "team", "owner")
		bad, good, sentinel   = newPod(ns, "bad", nil), newPod(ns, "good", map[string]string{"team": "a"}), newPod(ns, "sentinel", nil)
		violation, applied    = policyevents.ReasonViolation, policyevents.ReasonApplied
		wantViolationOfBadPod = "policy events-require-labels/pods fail: validation error: label team is required. rule pods failed at path /metadata/labels/"
	)
	f := features.New("result events").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			for _, o := range []k8s.Object{policy, bad, good} {
				if err := r.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			scanner = startScanner(t, cfg.Client().RESTConfig(), "default")
			merger = startMerger(t, cfg.Client().RESTConfig(), scanner)
			return ctx
		}).
		Assess("a failing Pod gets one PolicyViolation Event naming policy and rule", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			e := waitForEvent(ctx, t, cfg, bad, violation)
			if e.Type != corev1.EventTypeWarning || e.Message != wantViolationOfBadPod {
				t.Errorf("event %s %q, want Warning %q", e.Type, e.Message, wantViolationOfBadPod)
			}
			if e.ReportingController != policyevents.ControllerScan || e.Action != policyevents.ActionPassed || e.EventTime.IsZero() {
				t.Errorf("event from %q, action %q, eventTime %v; want %s, %q and a time", e.ReportingController, e.Action, e.EventTime, policyevents.ControllerScan, policyevents.ActionPassed)
			}
			if e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != bad.Name || e.InvolvedObject.APIVersion != "v1" {
				t.Errorf("event about %+v", e.InvolvedObject)
			}
			if e.Related == nil || e.Related.Kind != "ClusterPolicy" || e.Related.Name != policy.Name {
				t.Errorf("event related to %+v, want the policy", e.Related)
			}
			exactlyOnce(ctx, t, cfg, bad, violation)
			// And the policy's: "Pod ns/name: [rule] fail; message".
			pe := waitForEventMatching(ctx, t, cfg, policy, violation, "Pod "+ns+"/bad: ")
			wantOnPolicy := "Pod " + ns + "/bad: [pods] fail; validation error: label team is required. rule pods failed at path /metadata/labels/"
			if pe.Type != corev1.EventTypeWarning || pe.Message != wantOnPolicy || pe.Action != policyevents.ActionPassed || pe.Related == nil || pe.Related.Name != bad.Name {
				t.Errorf("policy event %s %q action %q related %+v, want Warning %q about the Pod", pe.Type, pe.Message, pe.Action, pe.Related, wantOnPolicy)
			}
			return ctx
		}).
		Assess("a forced rescan adds none; a pass has none without the flag", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scanner.waitSynced(t)
			if err := scanner.scanner.RescanAll(ctx); err != nil {
				t.Fatal(err)
			}
			// Events are sent in order: once the sentinel's (emitted after
			// the rescan) is stored, any of the rescan would be too.
			if err := cfg.Client().Resources().Create(ctx, sentinel); err != nil {
				t.Fatal(err)
			}
			waitForEvent(ctx, t, cfg, sentinel, violation)
			exactlyOnce(ctx, t, cfg, bad, violation)
			if got := resultEventsOf(ctx, t, cfg, policy, applied); len(got) != 0 {
				t.Errorf("the policy got %d PolicyApplied Events without --generate-success-events", len(got))
			}
			if got := resultEventsOf(ctx, t, cfg, good, violation); len(got) != 0 {
				t.Errorf("a passing Pod got %d PolicyViolation Events", len(got))
			}
			return ctx
		}).
		Assess("with success events, a resource that comes to pass gets a PolicyApplied Event", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			// The restarted scanner reads its results back from the final
			// reports: those of the failing Pods first.
			fail := map[string]string{policy.Name + "/pods": "fail"}
			waitForPolicyReport(ctx, t, cfg, bad, fail)
			waitForPolicyReport(ctx, t, cfg, sentinel, fail)
			// and the passing Pod's: a restart before its report is written
			// would read nothing back for it, and take its pass for a change.
			waitForPolicyReport(ctx, t, cfg, good, map[string]string{policy.Name + "/pods": "pass"})
			merger.stop()
			scanner.stop()
			scanner = startScannerWith(t, cfg.Client().RESTConfig(), "default", &outage{}, func(o *scan.Options) { o.Events.Success = true })
			merger = startMerger(t, cfg.Client().RESTConfig(), scanner)
			scanner.waitSynced(t)
			bad.Labels = map[string]string{"team": "b"}
			if err := cfg.Client().Resources().Update(ctx, bad); err != nil {
				t.Fatal(err)
			}
			want := "Pod " + ns + "/bad: pass"
			e := waitForEventMatching(ctx, t, cfg, policy, applied, want)
			if e.Type != corev1.EventTypeNormal || e.ReportingController != policyevents.ControllerScan || e.Action != policyevents.ActionPassed {
				t.Errorf("event %s %q from %s, action %q; want Normal %q from %s", e.Type, e.Message, e.ReportingController, e.Action, want, policyevents.ControllerScan)
			}
			// The restart emitted nothing again: results read back from the
			// reports are not changes.
			exactlyOnce(ctx, t, cfg, bad, violation)
			exactlyOnce(ctx, t, cfg, sentinel, violation)
			for _, pe := range resultEventsOf(ctx, t, cfg, policy, applied) {
				if strings.Contains(pe.Message, "/good:") {
					t.Errorf("a Pod that passed before the restart got a PolicyApplied Event: %q", pe.Message)
				}
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			merger.stop()
			scanner.stop()
			_ = cfg.Client().Resources().Delete(ctx, policy)
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
