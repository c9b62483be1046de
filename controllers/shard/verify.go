package shard

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Who counts as a member (issue 39).
//
// A Lease counts only when it is what a replica of tally writes: its
// duration is the configured one (a Lease claiming a longer one would stay
// "live" long after its holder is gone), and, where replicas run in Pods
// (Options.Owner), it is owned by a live Pod of the same name as its
// holder, not being deleted, with this replica's Pod's identifying labels
// (app.kubernetes.io/name, instance and component): a Pod of tally's
// Deployment. Anything else is ignored, counted
// (tally_shard_members_ignored_total) and told in a Warning Event on the
// Lease, once per Lease version. The Pod is read once per owner (a GET in
// tally's namespace), off the view's path: until it is, the Lease does not
// count.

// podLabels are the labels a member's Pod must share with this replica's.
var podLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}

// podVerdict is what a member's Pod was found to be.
type podVerdict struct {
	uid     types.UID
	pending bool
	reason  string // "" once found to be tally's
}

// vet says whether another member's Lease counts, and why not. Callers hold
// m.mu; a Pod not read yet is read in the background (then m.poke).
func (m *member) vet(l *coordinationv1.Lease, id string) (ok bool, reason string) {
	if l.Spec.LeaseDurationSeconds == nil || time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second != m.o.LeaseDuration {
		return false, fmt.Sprintf("its duration is not the configured %s", m.o.LeaseDuration)
	}
	if m.o.Owner == nil {
		return true, "" // replicas not run in Pods (a test harness): nothing to check them against
	}
	var owner *metav1.OwnerReference
	for i, r := range l.OwnerReferences {
		if r.Kind == "Pod" && r.APIVersion == "v1" && r.Name == id {
			owner = &l.OwnerReferences[i]
		}
	}
	if owner == nil {
		return false, "it is not owned by the Pod of its holder"
	}
	v, seen := m.pods[id]
	if !seen || v.uid != owner.UID {
		m.pods[id] = podVerdict{uid: owner.UID, pending: true}
		m.reads.Add(1)
		go func() {
			defer m.reads.Done()
			m.readPod(id, owner.UID)
		}()
		return false, ""
	}
	if v.pending {
		return false, ""
	}
	return v.reason == "", v.reason
}

// readPod reads a member's Pod and records the verdict.
func (m *member) readPod(name string, uid types.UID) {
	parent := m.ctx
	if parent == nil { // a member made by a test without Run
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, 10*time.Second)
	defer cancel()
	reason := m.podReason(ctx, name, uid)
	m.mu.Lock()
	if v, ok := m.pods[name]; ok && v.uid == uid {
		if reason == errTryAgain {
			delete(m.pods, name) // read again at the next view
		} else {
			m.pods[name] = podVerdict{uid: uid, reason: reason}
		}
	}
	m.mu.Unlock()
	m.poke()
}

// errTryAgain: the Pod could not be read (not a verdict).
const errTryAgain = "(try again)"

func (m *member) podReason(ctx context.Context, name string, uid types.UID) string {
	pods := m.o.Client.CoreV1().Pods(m.o.Namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "its Pod does not exist"
	case err != nil:
		m.log.Error(err, "reading a shard member's Pod failed; tried again", "pod", name)
		return errTryAgain
	case pod.UID != uid:
		return "its owner is not the Pod of that name"
	case pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return "its Pod is not live"
	}
	self := m.selfLabels(ctx)
	for _, k := range podLabels {
		if v, ok := self[k]; ok && pod.Labels[k] != v {
			return "its Pod is not one of tally's (label " + k + ")"
		}
	}
	return ""
}

// selfLabels are this replica's Pod's identifying labels (read once; nil
// when they cannot be read: the other checks stand).
func (m *member) selfLabels(ctx context.Context) map[string]string {
	m.mu.Lock()
	got := m.self
	m.mu.Unlock()
	if got != nil {
		return got
	}
	pod, err := m.o.Client.CoreV1().Pods(m.o.Namespace).Get(ctx, m.o.Owner.Name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	got = map[string]string{}
	for _, k := range podLabels {
		if v, ok := pod.Labels[k]; ok {
			got[k] = v
		}
	}
	m.mu.Lock()
	m.self = got
	m.mu.Unlock()
	return got
}

// ignoreLease counts and tells a Lease that does not count, once per
// version of it. Callers hold m.mu.
func (m *member) ignoreLease(l *coordinationv1.Lease, reason string) {
	key := l.Name + "/" + l.ResourceVersion
	if m.ignored[key] {
		return
	}
	m.ignored[key] = true
	m.metrics.ignored.Inc()
	m.log.Info("a membership Lease is ignored", "lease", l.Name, "reason", reason)
	if m.o.Recorder != nil {
		m.o.Recorder.Eventf(l, corev1.EventTypeWarning, "ShardMemberIgnored", "tally ignores this membership Lease: %s", reason)
	}
}
