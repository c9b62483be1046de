package merge

import (
	"maps"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

var _ watch.Sink = (*Merger)(nil)

func isPolicy(gvr schema.GroupVersionResource) bool {
	return gvr == GVRClusterPolicy || gvr == GVRPolicy
}

func isAdmission(gvr schema.GroupVersionResource) bool {
	return gvr == GVRAdmissionReport || gvr == GVRClusterAdmissionReport
}

func (m *Merger) log() logr.Logger {
	m.mu.Lock()
	defer m.mu.Unlock()
	return logr.FromContextOrDiscard(m.ctx)
}

// Upsert records a policy or an intermediate report.
func (m *Merger) Upsert(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isPolicy(gvr) {
		name, info, err := policyInfo(gvr, u)
		if err != nil {
			m.log().Error(err, "policy could not be read; its results are not reported", "name", u.GetName())
			return
		}
		m.mu.Lock()
		next := maps.Clone(m.policies) // copy on write: reconcilers read the map unlocked
		next[name] = info
		m.policies = next
		m.mu.Unlock()
		m.enqueuePolicy(name)
		return
	}
	var r kyvernov2.AdmissionReport // every intermediate kind has the same shape
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		m.log().Error(err, "intermediate report could not be read; ignored", "name", u.GetNamespace()+"/"+u.GetName())
		return
	}
	uid := u.GetLabels()[labelResourceUID]
	if uid == "" {
		uid = string(r.Spec.Owner.UID)
	}
	if uid == "" {
		return
	}
	hash := u.GetLabels()[labelResourceHash]
	m.mu.Lock()
	st := m.states[uid]
	if st == nil {
		st = &resourceState{}
		m.states[uid] = st
	}
	st.subject = report.Subject{APIVersion: r.Spec.Owner.APIVersion, Kind: r.Spec.Owner.Kind, Namespace: u.GetNamespace(), Name: r.Spec.Owner.Name, UID: r.Spec.Owner.UID}
	if isAdmission(gvr) {
		st.admission, st.admissionHash, st.hasAdmission = r.Spec.Results, hash, true
	} else {
		st.background, st.backgroundHash, st.hasBackground = r.Spec.Results, hash, true
	}
	m.mu.Unlock()
	m.queue.Add(uid)
}

// Remove forgets a policy or an intermediate report.
func (m *Merger) Remove(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if isPolicy(gvr) {
		name := u.GetName()
		if gvr == GVRPolicy {
			name = u.GetNamespace() + "/" + name
		}
		m.mu.Lock()
		next := maps.Clone(m.policies)
		delete(next, name)
		m.policies = next
		m.mu.Unlock()
		m.enqueuePolicy(name)
		return
	}
	uid := u.GetLabels()[labelResourceUID]
	if uid == "" {
		uid = u.GetName()
	}
	m.mu.Lock()
	if st := m.states[uid]; st != nil {
		if isAdmission(gvr) {
			st.admission, st.hasAdmission = nil, false
		} else {
			st.background, st.hasBackground = nil, false
		}
		if !st.hasAdmission && !st.hasBackground {
			delete(m.states, uid)
		}
	}
	m.mu.Unlock()
	m.queue.Add(uid)
}

// Replace makes objs the complete list of a kind.
func (m *Merger) Replace(gvr schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	present := map[string]bool{}
	for _, u := range objs {
		m.Upsert(gvr, u)
		present[u.GetNamespace()+"/"+u.GetName()] = true
	}
	if isPolicy(gvr) {
		m.mu.Lock()
		var gone []string
		for name := range m.policies {
			key := "/" + name
			if gvr == GVRPolicy {
				key = name
			}
			if (gvr == GVRPolicy) == containsSlash(name) && !present[key] {
				gone = append(gone, name)
			}
		}
		m.mu.Unlock()
		for _, name := range gone {
			ns, n := splitName(name)
			m.Remove(gvr, &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": n, "namespace": ns}}})
		}
	}
}

// Listed records that a kind was listed once.
func (m *Merger) Listed(gvr schema.GroupVersionResource) {
	m.mu.Lock()
	m.listed[gvr] = true
	m.mu.Unlock()
}

func containsSlash(s string) bool { return strings.Contains(s, "/") }

func splitName(name string) (ns, n string) {
	if ns, n, ok := strings.Cut(name, "/"); ok {
		return ns, n
	}
	return "", name
}

// enqueuePolicy enqueues every resource with results of the policy.
func (m *Merger) enqueuePolicy(name string) {
	m.mu.Lock()
	var uids []string
	for uid, st := range m.states {
		if hasPolicy(st, name) {
			uids = append(uids, uid)
		}
	}
	m.mu.Unlock()
	for _, uid := range uids {
		m.queue.Add(uid)
	}
}

func hasPolicy(st *resourceState, name string) bool {
	for _, r := range st.admission {
		if r.Policy == name {
			return true
		}
	}
	for _, r := range st.background {
		if r.Policy == name {
			return true
		}
	}
	return false
}
