package data

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/scheme"
	restfake "k8s.io/client-go/rest/fake"
	clocktesting "k8s.io/utils/clock/testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/api/apiresources"
	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/controllers/watch"
)

func configMap(namespace, name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": namespace}, "data": data}}
}

// running starts a Loader over a fake cluster holding objs, with an API
// server answering urlPath calls with their path, counting them.
func running(t *testing.T, onChange func([]string), objs ...runtime.Object) (*Loader, *atomic.Int64, *clocktesting.FakeClock) {
	t.Helper()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{apiresources.ConfigMap: "ConfigMapList"}, objs...)
	var calls atomic.Int64
	raw := &restfake.RESTClient{
		NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
		Client: restfake.CreateHTTPClient(func(req *http.Request) (*http.Response, error) {
			calls.Add(1)
			if strings.Contains(req.URL.Path, "missing") {
				return &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))}, nil
			}
			body := `{"path": "` + req.URL.Path + `", "items": [1, 2, 3]}`
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(bytes.NewBufferString(body))}, nil
		}),
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(client, raw, Options{OnChange: onChange, Clock: clk})
	// The fake client does not serve watch-lists: the test stands for the
	// ConfigMap watch (a source already stopped, and the objects delivered
	// to the sink as the watch delivers them).
	stopped, stop := context.WithCancel(context.Background())
	stop()
	l.source = watch.Start(stopped, client, apiresources.ConfigMap, l)
	for _, o := range objs {
		l.Upsert(context.Background(), apiresources.ConfigMap, o.(*unstructured.Unstructured))
	}
	l.Listed(context.Background(), apiresources.ConfigMap)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// Run has stored its context.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.ctx != nil, nil
	}); err != nil {
		t.Fatal("the loader's Run did not start")
	}
	return l, &calls, clk
}

func entry(t *testing.T, manifest string) kyvernov1.ContextEntry {
	t.Helper()
	var e kyvernov1.ContextEntry
	if err := yamlUnmarshal(manifest, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestConfigMapEntries(t *testing.T) {
	changed := make(chan []string, 10)
	l, _, _ := running(t, func(p []string) { changed <- p }, configMap("ns", "settings", map[string]any{"team": "a"}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data := map[string]any{"request": map[string]any{"namespace": "ns"}}

	v, err := l.Load(ctx, "pol", entry(t, `{name: settings, configMap: {name: settings, namespace: "{{ request.namespace }}"}}`), data)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(map[string]any)["data"].(map[string]any)["team"]; got != "a" {
		t.Errorf("data.team = %v, want a", got)
	}
	_, err = l.Load(ctx, "other", entry(t, `{name: gone, configMap: {name: absent, namespace: ns}}`), data)
	if err == nil || err.Error() != "configmap ns/absent not found" {
		t.Errorf("missing ConfigMap: error %v, want one naming it", err)
	}

	// A change of what a policy read tells it; the same content again does not.
	l.Upsert(context.Background(), apiresources.ConfigMap, configMap("ns", "settings", map[string]any{"team": "b"}))
	if got := <-changed; len(got) != 1 || got[0] != "pol" {
		t.Errorf("changed %v, want [pol]", got)
	}
	l.Upsert(context.Background(), apiresources.ConfigMap, configMap("ns", "settings", map[string]any{"team": "b"}))
	l.Upsert(context.Background(), apiresources.ConfigMap, configMap("ns", "absent", nil)) // created: its reader is told
	if got := <-changed; len(got) != 1 || got[0] != "other" {
		t.Errorf("changed %v, want [other]", got)
	}
	select {
	case got := <-changed:
		t.Errorf("unexpected change %v", got)
	default:
	}
}

func TestAPICallsAreMadeOncePerURLAndTTL(t *testing.T) {
	l, calls, clk := running(t, nil)
	ctx := context.Background()
	e := entry(t, `{name: n, apiCall: {urlPath: "/api/v1/namespaces/{{ request.namespace }}", jmesPath: "items[1]"}}`)
	for i := range 100 {
		ns := "a"
		if i%2 == 1 {
			ns = "b"
		}
		v, err := l.Load(ctx, "pol", e, map[string]any{"request": map[string]any{"namespace": ns}})
		if err != nil {
			t.Fatal(err)
		}
		if v != float64(2) {
			t.Fatalf("value %v, want 2", v)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls for 100 loads of 2 URLs, want 2", n)
	}
	clk.Step(DefaultCallTTL)
	if _, err := l.Load(ctx, "pol", e, map[string]any{"request": map[string]any{"namespace": "a"}}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d calls after the TTL, want 3", n)
	}
	// Read on and on (a long scan pass), an answer lives until its max age.
	load := func() {
		if _, err := l.Load(ctx, "pol", e, map[string]any{"request": map[string]any{"namespace": "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	for range int(DefaultCallMaxAge/(DefaultCallTTL/2)) - 1 {
		clk.Step(DefaultCallTTL / 2)
		load()
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d calls while read every %v for almost %v, want 3 (no new call)", n, DefaultCallTTL/2, DefaultCallMaxAge)
	}
	clk.Step(DefaultCallTTL / 2)
	load()
	if n := calls.Load(); n != 4 {
		t.Errorf("%d calls past the max age, want 4", n)
	}

	// A failing call is an error naming the URL, or the default when given.
	_, err := l.Load(ctx, "pol", entry(t, `{name: m, apiCall: {urlPath: /api/v1/namespaces/missing}}`), nil)
	if err == nil || !strings.Contains(err.Error(), "failed to GET resource with raw url: /api/v1/namespaces/missing") {
		t.Errorf("error %v, want one naming the URL", err)
	}
	v, err := l.Load(ctx, "pol", kyvernov1.ContextEntry{Name: "d", APICall: &kyvernov1.ContextAPICall{
		URLPath: "/api/v1/namespaces/missing", Default: &apiextv1.JSON{Raw: []byte(`"fallback"`)}}}, nil)
	if err != nil || v != "fallback" {
		t.Errorf("with a default: %v, %v; want fallback", v, err)
	}
}

func yamlUnmarshal(s string, v any) error { return sigsyaml.Unmarshal([]byte(s), v) }

// The resource library of CEL policies reads through the dynamic client,
// each distinct read once per CallTTL; a missing object is an error.
func TestResourceReads(t *testing.T) {
	l, _, clk := running(t, nil, configMap("ns", "settings", map[string]any{"team": "a"}))
	ctx := context.Background()
	for range 3 {
		obj, err := l.GetResource(ctx, "v1", "configmaps", "ns", "settings")
		if err != nil {
			t.Fatal(err)
		}
		if obj["data"].(map[string]any)["team"] != "a" {
			t.Fatalf("object %v", obj)
		}
	}
	list, err := l.ListResources(ctx, "v1", "configmaps", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if items, _ := list["items"].([]any); len(items) != 1 {
		t.Errorf("list %v, want one item", list)
	}
	if n := testutil.ToFloat64(l.requests.WithLabelValues("resource")); n != 2 {
		t.Errorf("%v reads for 3 gets and a list, want 2", n)
	}
	clk.Step(DefaultCallTTL)
	if _, err := l.GetResource(ctx, "v1", "configmaps", "ns", "gone"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing object: %v, want not found", err)
	}
	if _, err := l.GetResource(ctx, "a/b/c", "configmaps", "ns", "x"); err == nil || !strings.Contains(err.Error(), `apiVersion "a/b/c"`) {
		t.Errorf("a bad apiVersion: %v, want it named", err)
	}
}

// Concurrent loads of one URL (workers scanning the Pods of one namespace)
// make one request.
func TestConcurrentLoadsShareOneCall(t *testing.T) {
	l, calls, _ := running(t, nil)
	e := entry(t, `{name: n, apiCall: {urlPath: "/api/v1/namespaces/shared"}}`)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if _, err := l.Load(context.Background(), "pol", e, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls for 32 concurrent loads of one URL, want 1", n)
	}
}
