package watch

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
)

var gvrPods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func pod(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name, "resourceVersion": "7"},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
	}}
}

// recorder is a Sink that records what it receives.
type recorder struct {
	mu       sync.Mutex
	upserted []*unstructured.Unstructured
	replaced []*unstructured.Unstructured
	listed   bool
}

func (r *recorder) Upsert(_ context.Context, _ schema.GroupVersionResource, u *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.upserted = append(r.upserted, u)
}
func (r *recorder) Remove(context.Context, schema.GroupVersionResource, *unstructured.Unstructured) {}
func (r *recorder) Replace(_ context.Context, _ schema.GroupVersionResource, objs []*unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replaced = objs
}
func (r *recorder) Listed(context.Context, schema.GroupVersionResource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listed = true
}

type streamingRecorder struct{ recorder }

func (*streamingRecorder) StreamsLists() {}

func isStub(u *unstructured.Unstructured) bool {
	_, hasSpec := u.Object["spec"]
	return !hasSpec && u.GetUID() != "" && u.GetName() != "" && u.GetResourceVersion() != ""
}

func listOnce(t *testing.T, sink Sink) *recorder {
	t.Helper()
	// The paged LIST path (the watch-list one is tested below).
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvrPods: "PodList"},
		pod("a"), pod("b"), pod("c"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := Start(ctx, client, gvrPods, sink)
	defer src.Stop()
	rec := sink.(interface{ get() *recorder }).get()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.listed, nil
	}); err != nil {
		t.Fatal("the kind was never listed")
	}
	return rec
}

func (r *recorder) get() *recorder { return r }

func TestStreamingSinkListGetsObjectsOneByOneAndStubs(t *testing.T) {
	rec := listOnce(t, &streamingRecorder{})
	if len(rec.upserted) != 3 {
		t.Fatalf("%d objects upserted while listing, want 3", len(rec.upserted))
	}
	for _, u := range rec.upserted {
		if isStub(u) {
			t.Errorf("upserted %s is a stub, want the whole object", u.GetName())
		}
	}
	if len(rec.replaced) != 3 {
		t.Fatalf("Replace got %d objects, want 3", len(rec.replaced))
	}
	for _, u := range rec.replaced {
		if !isStub(u) || u.GetNamespace() != "ns" {
			t.Errorf("Replace got %v, want a stub with name, namespace, uid and resourceVersion", u.Object)
		}
	}
}

func TestPlainSinkGetsWholeLists(t *testing.T) {
	rec := listOnce(t, &recorder{})
	if len(rec.upserted) != 0 {
		t.Errorf("a plain sink got %d upserts while listing, want its list in Replace", len(rec.upserted))
	}
	if len(rec.replaced) != 3 || isStub(rec.replaced[0]) {
		t.Errorf("Replace got %d objects (stub: %v), want the 3 whole objects", len(rec.replaced), len(rec.replaced) > 0 && isStub(rec.replaced[0]))
	}
}

func TestStreamInitialEvents(t *testing.T) {
	fake := watch.NewFake()
	rec := &recorder{}
	w := streamInitialEvents(context.Background(), fake, gvrPods, rec)
	defer w.Stop()
	bookmark := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"resourceVersion": "9", "annotations": map[string]any{metav1.InitialEventsAnnotationKey: "true"}}}}
	go func() {
		fake.Add(pod("a"))
		fake.Add(pod("b"))
		fake.Action(watch.Bookmark, bookmark)
		fake.Add(pod("c")) // after the initial events: passed through whole
	}()
	var got []watch.Event
	for e := range w.ResultChan() {
		got = append(got, e)
		if len(got) == 4 {
			break
		}
	}
	for i, e := range got[:2] {
		if u := e.Object.(*unstructured.Unstructured); e.Type != watch.Added || !isStub(u) {
			t.Errorf("initial event %d: %s %v, want an ADDED stub", i, e.Type, u.Object)
		}
	}
	if got[2].Type != watch.Bookmark {
		t.Errorf("event 2 is %s, want the bookmark", got[2].Type)
	}
	if u := got[3].Object.(*unstructured.Unstructured); isStub(u) {
		t.Error("an event after the initial ones was stubbed")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.upserted) != 2 || isStub(rec.upserted[0]) || rec.upserted[1].GetName() != "b" {
		t.Errorf("the sink got %d initial objects, want a and b whole", len(rec.upserted))
	}
}

// panickySink panics on the Upsert of one object.
type panickySink struct {
	streamingRecorder
	on string
}

func (p *panickySink) Upsert(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	if u.GetName() == p.on {
		var m map[string]int
		m["boom"]++ // a real runtime panic
	}
	p.streamingRecorder.Upsert(context.Background(), gvr, u)
}

func TestASinkPanicSkipsTheObjectAndTheSourceGoesOn(t *testing.T) {
	before := SinkPanics()
	rec := listOnce(t, &panickySink{on: "b"})
	var names []string
	for _, u := range rec.upserted {
		names = append(names, u.GetName())
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "c" {
		t.Errorf("upserted %v, want a and c: the list must go on past the panic", names)
	}
	if n := SinkPanics() - before; n != 1 {
		t.Errorf("%d sink panics counted, want 1", n)
	}
}

// A filtered watch stopped while an event waits to be read ends its
// goroutine (apimachinery's watch.Filter blocks on its send for ever).
func TestFilterEndsWhenStoppedWithAnEventUnread(t *testing.T) {
	upstream := watch.NewFakeWithChanSize(1, false)
	fw := filter(upstream, func(e watch.Event) (watch.Event, bool) { return e, true })
	upstream.Add(&unstructured.Unstructured{})
	// The filter took it, and nobody reads it.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(upstream.ResultChan()) == 0, nil
	}); err != nil {
		t.Fatal("the filter never took the event")
	}
	fw.Stop()
	// The event in flight may still be delivered to a reader that comes;
	// then the channel closes: the goroutine has ended.
	for delivered := 0; ; delivered++ {
		select {
		case _, ok := <-fw.ResultChan():
			if !ok {
				if !upstream.IsStopped() {
					t.Error("the upstream watch was not stopped")
				}
				return
			}
			if delivered > 0 {
				t.Fatal("events delivered after Stop")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the filter's goroutine did not end when stopped")
		}
	}
}

// BenchmarkFilter passes events through tally's stoppable filter, and
// through apimachinery's watch.Filter it replaced, for comparison.
func BenchmarkFilter(b *testing.B) {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	keep := func(e watch.Event) (watch.Event, bool) { return e, true }
	for name, wrap := range map[string]func(watch.Interface) watch.Interface{
		"tally":        func(w watch.Interface) watch.Interface { return filter(w, keep) },
		"apimachinery": func(w watch.Interface) watch.Interface { return watch.Filter(w, keep) },
	} {
		b.Run(name, func(b *testing.B) {
			up := watch.NewFakeWithChanSize(128, false)
			fw := wrap(up)
			go func() {
				for range b.N {
					up.Add(obj)
				}
			}()
			for range b.N {
				<-fw.ResultChan()
			}
			fw.Stop()
		})
	}
}
