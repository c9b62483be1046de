package handover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tally-dev/tally/controllers/watch"
)

var (
	bsr  = schema.GroupVersionResource{Group: Group, Version: Version, Resource: namespacedPlural}
	cbsr = schema.GroupVersionResource{Group: Group, Version: Version, Resource: clusterPlural}
)

func rep(ns, name, team string) *Report {
	return &Report{APIVersion: GroupVersion, Kind: kindOf(ns),
		Metadata: Meta{Name: name, Namespace: ns, Labels: map[string]string{"team": team}},
		Spec:     json.RawMessage(`{"owner":{"apiVersion":"v1","kind":"Pod","name":"p","uid":"` + name + `"},"results":[]}`)}
}

// recorder is a watch.Sink that keeps what it was told.
type recorder struct {
	mu     sync.Mutex
	have   map[string]string // ns/name -> resourceVersion
	listed bool
}

func (r *recorder) Upsert(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.have[u.GetNamespace()+"/"+u.GetName()] = u.GetResourceVersion()
}

func (r *recorder) Remove(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.have, u.GetNamespace()+"/"+u.GetName())
}

func (r *recorder) Replace(_ context.Context, _ schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.have = map[string]string{}
	for _, u := range objs {
		r.have[u.GetNamespace()+"/"+u.GetName()] = u.GetResourceVersion()
	}
}

func (r *recorder) Listed(context.Context, schema.GroupVersionResource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listed = true
}

func (r *recorder) keys() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for k := range r.have {
		out[k] = true
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func serve(t *testing.T, h *Hub) dynamic.Interface {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestReflectorReadsTheHub(t *testing.T) {
	h := New(Options{})
	c := serve(t, h)
	for _, r := range []*Report{rep("a", "u1", "x"), rep("b", "u2", "y"), rep("", "u3", "x")} {
		if err := h.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	// Not ready: a list waits.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.Resource(bsr).List(ctx, metav1.ListOptions{})
	cancel()
	if err == nil {
		t.Fatal("a list was answered before the scanner was ready")
	}
	h.SetReady()

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	ns, cl := &recorder{have: map[string]string{}}, &recorder{have: map[string]string{}}
	s1, s2 := watch.Start(ctx, c, bsr, ns), watch.Start(ctx, c, cbsr, cl)
	defer s1.Stop()
	defer s2.Stop()
	eventually(t, "the initial lists", func() bool {
		k1, k2 := ns.keys(), cl.keys()
		return len(k1) == 2 && k1["a/u1"] && k1["b/u2"] && len(k2) == 1 && k2["/u3"]
	})
	if err := h.Put(rep("a", "u4", "x")); err != nil {
		t.Fatal(err)
	}
	h.Delete("b", "u2")
	h.Delete("b", "nothing") // not held: no change
	eventually(t, "the changes", func() bool {
		k := ns.keys()
		return len(k) == 2 && k["a/u1"] && k["a/u4"]
	})

	// Get, NotFound, selectors, namespaces.
	got, err := c.Resource(bsr).Namespace("a").Get(context.Background(), "u4", metav1.GetOptions{})
	if err != nil || got.GetLabels()["team"] != "x" || got.GetResourceVersion() == "" || got.GetCreationTimestamp().Time.IsZero() {
		t.Fatalf("get: %v %v", got, err)
	}
	if _, err := c.Resource(bsr).Namespace("b").Get(context.Background(), "u2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get of a deleted report: %v, want NotFound", err)
	}
	list, err := c.Resource(bsr).List(context.Background(), metav1.ListOptions{LabelSelector: "team=x"})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list team=x: %v %v", list, err)
	}
	list, err = c.Resource(bsr).Namespace("b").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("list in b: %v %v", list, err)
	}
	if _, err := c.Resource(bsr).List(context.Background(), metav1.ListOptions{LabelSelector: "team in (("}); !apierrors.IsBadRequest(err) {
		t.Fatalf("a bad selector: %v, want BadRequest", err)
	}
}

func TestWatchFromAVersionNotHeldIsGone(t *testing.T) {
	h := New(Options{MaxEvents: 2})
	c := serve(t, h)
	h.SetReady()
	if err := h.Put(rep("a", "u1", "x")); err != nil {
		t.Fatal(err)
	}
	list, err := c.Resource(bsr).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := list.GetResourceVersion()
	for range 10 {
		if err := h.Put(rep("a", "u1", "y")); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Resource(bsr).Watch(context.Background(), metav1.ListOptions{ResourceVersion: old})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from a version no longer held: %v, want Gone", err)
	}
	// A version of an earlier incarnation is below this one's.
	later := New(Options{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if _, _, expired := later.since(h.rv); !expired {
		t.Fatal("a restarted scanner accepted a version of the one before")
	}
	// A version still held resumes.
	w, err := c.Resource(bsr).Watch(context.Background(), metav1.ListOptions{ResourceVersion: strconv.FormatUint(h.rv-1, 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case e := <-w.ResultChan():
		if e.Type != "MODIFIED" {
			t.Fatalf("event %s, want MODIFIED", e.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}

func TestDiscoveryForKubectl(t *testing.T) {
	h := New(Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	d, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := d.ServerResourcesForGroupVersion(GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if len(rl.APIResources) != 2 || rl.APIResources[0].ShortNames[0] != "bgscanr" {
		t.Fatalf("resources %+v", rl.APIResources)
	}
	groups, err := d.ServerGroups()
	if err != nil || groups.Groups[len(groups.Groups)-1].Name != Group {
		t.Fatalf("groups %+v %v", groups, err)
	}
}

// /readyz names the Hub's incarnation, so the merger tells a scanner that
// restarted between two probes from the one it read.
func TestReadyzNamesTheIncarnation(t *testing.T) {
	probe := func(h *Hub) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	first := New(Options{})
	if code, _ := probe(first); code != 503 {
		t.Fatalf("not ready yet: %d, want 503", code)
	}
	first.SetReady()
	later := New(Options{Now: func() time.Time { return time.Now().Add(time.Second) }})
	later.SetReady()
	c1, b1 := probe(first)
	c2, b2 := probe(later)
	if c1 != 200 || c2 != 200 || b1 == b2 || !strings.HasPrefix(b1, "ok ") {
		t.Fatalf("readyz %d %q and %d %q: want ok and two incarnations", c1, b1, c2, b2)
	}
}

// Under IncarnationPath only that incarnation answers: a merger following
// one run of the scanner never lists a later run's reports (another shard)
// through a Switch that moved on.
func TestAnIncarnationPathAnswersOnlyItsIncarnation(t *testing.T) {
	first := New(Options{})
	first.SetReady()
	later := New(Options{Now: func() time.Time { return time.Now().Add(time.Second) }})
	later.SetReady()
	var sw Switch
	sw.Set(first)
	list := func(path string) int {
		rec := httptest.NewRecorder()
		sw.ServeHTTP(rec, httptest.NewRequest("GET", path+"/apis/kyverno.io/v2/backgroundscanreports", nil))
		return rec.Code
	}
	mine := IncarnationPath(first.incarnation)
	if code := list(mine); code != 200 {
		t.Fatalf("list under its own incarnation: %d, want 200", code)
	}
	sw.Set(later)
	if code := list(mine); code != http.StatusGone {
		t.Errorf("list under an incarnation over: %d, want 410 Gone", code)
	}
	if code := list(""); code != 200 {
		t.Errorf("list without an incarnation: %d, want 200 (the current one)", code)
	}
}

// pssReport is a BackgroundScanReport as the scanner hands over one for a
// Pod under the 17 Pod Security policies: packed results (one JSON string
// annotation), labels naming the resource and the policies.
func pssReport(i int) *Report {
	var results strings.Builder
	results.WriteString("[")
	labels := map[string]string{
		"audit.kyverno.io/resource.uid":  fmt.Sprintf("5f0c5c9e-0000-4000-8000-%012d", i),
		"audit.kyverno.io/resource.hash": fmt.Sprintf("%032x", i*7919),
		"audit.kyverno.io/resource.gvr":  "pods.v1", "app.kubernetes.io/managed-by": "tally",
	}
	for p := range 17 {
		if p > 0 {
			results.WriteString(",")
		}
		name := fmt.Sprintf("disallow-pss-control-%02d", p)
		labels["cpol.kyverno.io/"+name] = "41"
		fmt.Fprintf(&results, `{"policy":%q,"rule":"autogen-%s","result":"pass","message":"validation rule 'autogen-%s' passed.","source":"kyverno"}`, name, name, name)
	}
	results.WriteString("]")
	return &Report{APIVersion: GroupVersion, Kind: "BackgroundScanReport", Metadata: Meta{
		Namespace: "bench", Name: labels["audit.kyverno.io/resource.uid"], Labels: labels,
		Annotations:     map[string]string{"reports.tally.dev/results": results.String(), "reports.tally.dev/changed-at": "2026-11-26T21:00:00Z"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: fmt.Sprintf("pod-%d", i), UID: types.UID(labels["audit.kyverno.io/resource.uid"])}},
	}, Spec: json.RawMessage(`{"owner":{"apiVersion":"v1","kind":"Pod","name":"pod","uid":"u"},"summary":{"pass":17}}`)}
}

// BenchmarkHubPut hands over Pod Security reports and says what the Hub
// holds per report (its bodies are compressed).
func BenchmarkHubPut(b *testing.B) {
	h := New(Options{})
	reports := make([]*Report, 1000)
	for i := range reports {
		reports[i] = pssReport(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := h.Put(reports[i%len(reports)]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	h.mu.Lock()
	held, plain := 0, 0
	for _, o := range h.objects {
		held += len(o.packed)
		plain += len(o.body(nil))
	}
	n := len(h.objects)
	h.mu.Unlock()
	b.ReportMetric(float64(held)/float64(n), "held-B/report")
	b.ReportMetric(float64(plain)/float64(n), "json-B/report")
}
