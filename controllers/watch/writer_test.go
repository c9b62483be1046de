package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestWriterCreatesOrPatches(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
	object := func(results string) []byte {
		data, _ := json.Marshal(map[string]any{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
			"metadata": map[string]any{"name": "r", "namespace": "ns"}, "results": results})
		return data
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		existing    bool // the object is in the cluster
		known       bool // the writer's caller believes it is
		wantCreated bool
	}{
		{"new: created", false, false, true},
		{"known: patched", true, true, false},
		{"deleted behind the writer's back: created again", false, true, true},
		{"created behind the writer's back: patched", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.existing {
				var u unstructured.Unstructured
				if err := u.UnmarshalJSON(object("old")); err != nil {
					t.Fatal(err)
				}
				objs = append(objs, &u)
			}
			client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "PolicyReportList"}, objs...)
			w := &Writer{Client: client, FieldManager: "test"}
			_, created, err := w.Write(ctx, gvr, "ns", "r", tc.known, func() ([]byte, error) { return object("new"), nil },
				[]PatchOp{Set("/results", "new")})
			if err != nil || created != tc.wantCreated {
				t.Fatalf("Write = %v, %v; want created %v", created, err, tc.wantCreated)
			}
			got, err := client.Resource(gvr).Namespace("ns").Get(ctx, "r", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Object["results"] != "new" {
				t.Errorf("results %v, want new", got.Object["results"])
			}
		})
	}
}

// A server that answers a PATCH of a missing object with something else
// than "not found" (reports-server answers 500) must not leave the object
// missing for good: the writer reads it, and creates it once it is gone.
func TestWriterReadsBeforePatchingAgain(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
	body, _ := json.Marshal(map[string]any{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
		"metadata": map[string]any{"name": "r", "namespace": "ns"}, "results": "new"})
	for name, exists := range map[string]bool{"missing: created": false, "present: the error is returned": true} {
		t.Run(name, func(t *testing.T) {
			var objs []runtime.Object
			if exists {
				u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
					"metadata": map[string]any{"name": "r", "namespace": "ns"}}}
				objs = append(objs, u)
			}
			client := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "PolicyReportList"}, objs...)
			client.PrependReactor("patch", "policyreports", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewInternalError(errors.New("record not found"))
			})
			w := &Writer{Client: client, FieldManager: "test"}
			_, created, err := w.Write(context.Background(), gvr, "ns", "r", true, func() ([]byte, error) { return body, nil }, []PatchOp{Set("/results", "new")})
			if exists {
				if err == nil {
					t.Error("the PATCH's failure on an object that exists was not returned")
				}
				return
			}
			if err != nil || !created {
				t.Fatalf("Write = %v, %v; want it created", created, err)
			}
		})
	}
}

func TestResourceVersionOf(t *testing.T) {
	for raw, want := range map[string]string{
		`{"apiVersion":"wgpolicyk8s.io/v1alpha2","kind":"PolicyReport","metadata":{"name":"r","resourceVersion":"42"},"results":[]}`: "42",
		`{"results":[{"a":1}],"metadata":{"resourceVersion":"7"}}`:                                                                   "7",
		`{"metadata":{"name":"r"}}`: "",
		`not json`:                  "",
	} {
		if got := resourceVersionOf([]byte(raw)); got != want {
			t.Errorf("resourceVersionOf(%s) = %q, want %q", raw, got, want)
		}
	}
}

// BenchmarkResourceVersionOf is the cost of reading the resourceVersion of
// a write's answer: a final report of 20 results (about 10 KiB).
func BenchmarkResourceVersionOf(b *testing.B) {
	results := make([]any, 20)
	for i := range results {
		results[i] = map[string]any{"policy": fmt.Sprintf("policy-%d", i), "rule": "rule", "result": "pass", "message": "validation rule 'rule' passed.",
			"source": "kyverno", "scored": true, "timestamp": map[string]any{"seconds": 1795460076, "nanos": 0}, "properties": map[string]any{"process": "background scan"}}
	}
	raw, _ := json.Marshal(map[string]any{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
		"metadata": map[string]any{"name": "u1", "namespace": "ns", "resourceVersion": "12345", "labels": map[string]any{"app.kubernetes.io/managed-by": "tally"}},
		"scope":    map[string]any{"kind": "Pod", "name": "p"}, "summary": map[string]any{"pass": 20}, "results": results})
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if resourceVersionOf(raw) != "12345" {
			b.Fatal("wrong resourceVersion")
		}
	}
}
