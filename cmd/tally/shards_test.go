package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/shard"
)

func memberLease(id string, renewed time.Time) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": shard.LeaseName(id), "namespace": "tally-system", "labels": map[string]any{shard.LabelMember: "tally-scanner"}},
		"spec": map[string]any{"holderIdentity": id, "leaseDurationSeconds": int64(15),
			"renewTime": renewed.UTC().Format("2006-01-02T15:04:05.000000Z07:00")},
	}}
}

func TestShardsShowsEachLiveMembersNamespaces(t *testing.T) {
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	var objs []runtime.Object
	objs = append(objs, memberLease("pod-a", now.Add(-2*time.Second)), memberLease("pod-b", now.Add(-3*time.Second)),
		memberLease("pod-gone", now.Add(-time.Minute)))
	namespaces := []string{"default", "kube-system", "prod", "payments", "team-1", "team-2", "team-3"}
	for _, ns := range namespaces {
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}})
	}
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiresources.Lease: "LeaseList", apiresources.Namespace: "NamespaceList"}, objs...)
	old := newDynamicClient
	newDynamicClient = func(string) (dynamic.Interface, error) { return client, nil }
	t.Cleanup(func() { newDynamicClient = old })

	var out bytes.Buffer
	if err := runShards(context.Background(), &out, shardsOptions{namespace: "tally-system", group: "tally-scanner", output: "json"}, nil, now); err != nil {
		t.Fatal(err)
	}
	var members []shardMember
	if err := json.Unmarshal(out.Bytes(), &members); err != nil {
		t.Fatal(err)
	}
	live := []string{"pod-a", "pod-b"}
	seen := 0
	for _, m := range members {
		if m.Identity == "pod-gone" {
			if m.Live || len(m.Namespaces) > 0 {
				t.Errorf("an expired member is shown live or owning %v", m.Namespaces)
			}
			continue
		}
		for _, ns := range m.Namespaces {
			if owner := shard.Owner(live, ns); owner != m.Identity {
				t.Errorf("%s shown under %s, owned by %s", ns, m.Identity, owner)
			}
			seen++
		}
		if m.Cluster != (shard.Owner(live, "") == m.Identity) {
			t.Errorf("%s: cluster-scoped shown %v", m.Identity, m.Cluster)
		}
	}
	if seen != len(namespaces) {
		t.Errorf("%d namespaces shown, want %d", seen, len(namespaces))
	}
	out.Reset()
	if err := runShards(context.Background(), &out, shardsOptions{namespace: "tally-system", group: "tally-scanner", output: "table"}, []string{"prod"}, now); err != nil {
		t.Fatal(err)
	}
	if want := "prod\t" + shard.Owner(live, "prod"); strings.TrimSpace(out.String()) != want {
		t.Errorf("owner of prod: %q, want %q", out.String(), want)
	}
	if err := runShards(context.Background(), &out, shardsOptions{namespace: "elsewhere", group: "tally-scanner", output: "table"}, nil, now); err == nil || !strings.Contains(err.Error(), "--sharding") {
		t.Errorf("no Lease: %v, want an error saying tally runs unsharded", err)
	}
}
