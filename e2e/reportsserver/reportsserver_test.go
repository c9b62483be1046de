package reportsserver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/tally-dev/tally/controllers/watch"
	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/e2e/reportsserver"
)

// thirdParty skips the test when ../shared/third_party is absent (a user's
// clone), and fails it in CI.
func thirdParty(t *testing.T) {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("TALLY_THIRD_PARTY")
	if dir == "" {
		dir = filepath.Join(root, "..", "shared", "third_party")
	}
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: the third-party sources are missing (%s): %v", dir, err)
		}
		t.Skipf("no third-party sources at %s (TALLY_THIRD_PARTY): reports-server cannot be built", dir)
	}
}

// TestReportsServerStoresReports runs reports-server beside the local
// control plane and writes a PolicyReport through the API server as tally's
// writer does: the report is stored there (its annotation), a PATCH of a
// missing report is answered 500 (not 404) and the writer still creates it,
// and a delete with a stale precondition is not refused (reports-server
// ignores preconditions).
func TestReportsServerStoresReports(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane and a reports-server build")
	}
	thirdParty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Aggregator: true, NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := cluster.InstallCRDs(c.Config); err != nil {
		t.Fatal(err)
	}
	s, err := reportsserver.Start(ctx, c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
	w := &watch.Writer{Client: dyn, FieldManager: "tally-test"}
	body := func() ([]byte, error) {
		return []byte(`{"apiVersion":"wgpolicyk8s.io/v1alpha2","kind":"PolicyReport","metadata":{"name":"r1","namespace":"default"},` +
			`"results":[{"policy":"p","rule":"r","result":"fail","source":"kyverno"}],"summary":{"fail":1}}`), nil
	}
	ops := []watch.PatchOp{watch.Set("/summary", map[string]any{"fail": 1})}

	// A PATCH of a report reports-server does not hold: not a 404.
	_, err = dyn.Resource(gvr).Namespace("default").Patch(ctx, "r1", types.JSONPatchType, []byte(`[{"op":"add","path":"/summary","value":{}}]`), metav1.PatchOptions{})
	if err == nil {
		t.Fatal("PATCH of a missing report succeeded")
	}
	var code int32
	if status, ok := err.(apierrors.APIStatus); ok {
		code = status.Status().Code
	}
	t.Logf("PATCH of a missing report: HTTP %d, not found: %v: %v", code, apierrors.IsNotFound(err), err)
	// tally's writer, believing the report exists, creates it all the same.
	if _, created, err := w.Write(ctx, gvr, "default", "r1", true, body, ops); err != nil || !created {
		t.Fatalf("Write of a report reports-server lost: created=%v, %v", created, err)
	}
	got, err := dyn.Resource(gvr).Namespace("default").Get(ctx, "r1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.GetAnnotations()[reportsserver.Annotation]; v != reportsserver.AnnotationValue {
		t.Fatalf("annotation %s = %q: the report is not stored by reports-server", reportsserver.Annotation, v)
	}
	// Patched, as tally rewrites it.
	if _, created, err := w.Write(ctx, gvr, "default", "r1", true, body, ops); err != nil || created {
		t.Fatalf("second Write: created=%v, %v", created, err)
	}

	// A second report, for the paged list below.
	body2 := func() ([]byte, error) {
		b, _ := body()
		return []byte(strings.Replace(string(b), `"name":"r1"`, `"name":"r2"`, 1)), nil
	}
	if _, _, err := w.Write(ctx, gvr, "default", "r2", false, body2, ops); err != nil {
		t.Fatal(err)
	}
	list, err := dyn.Resource(gvr).Namespace("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("list with limit 1 of 2 reports: %d items, continue %q", len(list.Items), list.GetContinue())

	// A delete whose precondition does not hold.
	uid := types.UID("not-the-uid")
	err = dyn.Resource(gvr).Namespace("default").Delete(ctx, "r1", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	t.Logf("delete with a wrong UID precondition: %v", err)
	_, getErr := dyn.Resource(gvr).Namespace("default").Get(ctx, "r1", metav1.GetOptions{})
	t.Logf("report after it: %v", getErr)
}
