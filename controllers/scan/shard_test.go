package scan

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/record"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/report"
)

// mine is the shard of the tests: every namespace but "theirs", and not the
// cluster-scoped resources.
func mine(namespace string) bool { return namespace != "theirs" && namespace != "" }

func configMap(namespace, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": namespace, "uid": namespace + "-" + name, "resourceVersion": "1"}}}
}

func namespaceObject(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "uid": "ns-" + name, "resourceVersion": "1"}}}
}

// A sharded scanner holds only its shard's resources, watches a needed
// kind in each namespace of its shard (none elsewhere), and a namespace's
// complete list forgets only that namespace's resources.
func TestAShardedScannerHoldsAndWatchesOnlyItsShard(t *testing.T) {
	s := controlScanner(t)
	s.opts.Shard = mine
	s.handlers.shard = mine
	s.handlers.kinds.owns = mine
	s.handlers.kinds.namespaced[gvrConfigMaps] = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.handlers.kinds.ctx = ctx
	defer s.handlers.kinds.stop()

	for _, ns := range []string{"a", "b", "theirs"} {
		s.handlers.Upsert(ctx, apiresources.Namespace, namespaceObject(ns))
	}
	s.handlers.kinds.mu.Lock()
	var watched []string
	for key := range s.handlers.kinds.sources {
		if key.gvr == gvrConfigMaps {
			watched = append(watched, key.ns)
		}
	}
	s.handlers.kinds.mu.Unlock()
	if len(watched) != 2 || !slices.Contains(watched, "a") || !slices.Contains(watched, "b") {
		t.Errorf("ConfigMaps watched in %v, want in a and b only (one watch each, filtered by the API server)", watched)
	}
	if n := s.handlers.kinds.ownedNamespaces(); n != 2 {
		t.Errorf("owned namespaces = %d, want 2", n)
	}

	s.handlers.Upsert(ctx, gvrConfigMaps, configMap("a", "one"))
	s.handlers.Upsert(ctx, gvrConfigMaps, configMap("b", "two"))
	s.handlers.Upsert(ctx, gvrConfigMaps, configMap("theirs", "three")) // a watch of every namespace would deliver it
	r := s.handlers.store.Read()
	for uid, want := range map[string]bool{"a-one": true, "b-two": true, "theirs-three": false} {
		if res, _ := r.Resource(uid); (res != nil) != want {
			t.Errorf("resource %s stored: %v, want %v", uid, res != nil, want)
		}
	}
	// The watch of namespace a lists it empty: a's ConfigMap goes, b's stays.
	inNamespace{namespacedSink: s.handlers, ns: "a"}.Replace(ctx, gvrConfigMaps, nil)
	r = s.handlers.store.Read()
	if res, _ := r.Resource("a-one"); res != nil {
		t.Errorf("a's ConfigMap stayed after a's complete list lacked it")
	}
	if res, _ := r.Resource("b-two"); res == nil {
		t.Errorf("b's ConfigMap went with a's list")
	}
	// A namespace deleted stops its watches.
	s.handlers.Remove(ctx, apiresources.Namespace, namespaceObject("b"))
	s.handlers.kinds.mu.Lock()
	_, still := s.handlers.kinds.sources[sourceKey{gvr: gvrConfigMaps, ns: "b"}]
	s.handlers.kinds.mu.Unlock()
	if still {
		t.Errorf("the watch of a deleted namespace runs on")
	}
}

// A cluster-scoped kind is watched only by the owner of "".
func TestAClusterScopedKindIsWatchedOnlyByTheOwnerOfTheClusterShard(t *testing.T) {
	k := newKindWatch(nil, nil, nil, nil)
	k.owns = mine
	gvr := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	if keys := k.keysFor(gvr, false); len(keys) != 0 {
		t.Errorf("not owning \"\", a cluster-scoped kind is watched: %v", keys)
	}
	k.owns = func(string) bool { return true }
	if keys := k.keysFor(gvr, false); len(keys) != 1 || keys[0].ns != "" {
		t.Errorf("owning \"\", cluster-scoped kind watches = %v, want one of every namespace", keys)
	}
}

// After a hand-over the scanner reads back only the final reports of its
// shard: another replica's are neither seeded nor swept as orphans.
func TestASeedReadsOnlyTheShardsReports(t *testing.T) {
	final := func(namespace, uid string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
			"metadata": map[string]any{"name": uid, "namespace": namespace, "labels": map[string]any{report.LabelManagedBy: report.ManagedBy}},
			"scope":    map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": namespace, "uid": uid},
			"results": []any{map[string]any{"policy": "a", "rule": "r", "result": "pass", "source": "kyverno", "scored": true,
				"timestamp": map[string]any{"seconds": int64(1795577752)}, "properties": map[string]any{"process": "background scan"}}},
		}}
	}
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.PolicyReport: "PolicyReportList", apiresources.ClusterPolicyReport: "ClusterPolicyReportList",
		apiresources.Namespace: "NamespaceList"},
		watch.WithNamespaces(final("a", "uid-a"), final("theirs", "uid-theirs"))...)
	w, _, _ := newTestWriter(client)
	w.shard = mine
	seeded, err := seedAll(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(seeded) != 1 || seeded["uid-a"] == nil {
		t.Errorf("seeded %v, want uid-a only", keysOf(seeded))
	}
	if got := w.known(); len(got) != 1 || got[0] != "uid-a" {
		t.Errorf("known %v: another shard's report would be swept as an orphan", got)
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A replica that does not keep the policies' status (no Recorder) still
// reports a read it was refused: no other replica made that read.
func TestAShardWithoutThePolicyStatusReportsTheReadsItWasRefused(t *testing.T) {
	s := controlScanner(t)
	readEvents := record.NewFakeRecorder(4)
	s.opts.Recorder, s.opts.ReadEvents = nil, readEvents
	s.opts.Shard = mine
	ctx := context.Background()
	s.handlers.Upsert(ctx, apiresources.ClusterPolicy, churnPolicy("reads-secrets", "m"))
	settle(t, s)
	s.DataForbidden("reads-secrets", errors.New(`secrets is forbidden`))
	select {
	case e := <-readEvents.Events:
		if !strings.HasPrefix(e, "Warning DataForbidden ") || !strings.Contains(e, "secrets is forbidden") {
			t.Errorf("event %q, want a DataForbidden Warning naming the refusal", e)
		}
	default:
		t.Errorf("no DataForbidden Event from a replica without the policies' status")
	}
}
