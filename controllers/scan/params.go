package scan

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/engine"
)

// paramCache serves the params of ValidatingAdmissionPolicy bindings from
// the API server, each (kind, namespace, name, selector) read at most once
// per paramTTL: a scan pass over many resources reads each once.
type paramCache struct {
	client dynamic.Interface
	kinds  *kindWatch
	clock  clock.PassiveClock

	mu      sync.Mutex
	entries map[string]paramEntry
}

type paramEntry struct {
	at     time.Time
	params []map[string]any
	err    error
}

// paramTTL is how long a params read is reused.
const paramTTL = 10 * time.Second

func newParamCache(client dynamic.Interface, kinds *kindWatch, clk clock.PassiveClock) *paramCache {
	return &paramCache{client: client, kinds: kinds, clock: clk, entries: map[string]paramEntry{}}
}

var _ engine.ParamSource = (*paramCache)(nil)

// Params implements engine.ParamSource: the named object (none if it does
// not exist), or the objects a selector picks.
func (pc *paramCache) Params(ctx context.Context, kind schema.GroupVersionKind, namespace, name string, selector *metav1.LabelSelector) ([]map[string]any, error) {
	sel := ""
	if selector != nil {
		s, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil {
			return nil, fmt.Errorf("paramRef.selector: %w", err)
		}
		sel = s.String()
	}
	key := kind.String() + "|" + namespace + "|" + name + "|" + sel
	now := pc.clock.Now()
	pc.mu.Lock()
	e, ok := pc.entries[key]
	pc.mu.Unlock()
	if ok && now.Sub(e.at) < paramTTL {
		return e.params, e.err
	}
	params, err := pc.read(ctx, kind, namespace, name, selector != nil, sel)
	pc.mu.Lock()
	for k, old := range pc.entries { // a few entries per binding: swept as they expire
		if now.Sub(old.at) >= paramTTL {
			delete(pc.entries, k)
		}
	}
	pc.entries[key] = paramEntry{at: now, params: params, err: err}
	pc.mu.Unlock()
	return params, err
}

func (pc *paramCache) read(ctx context.Context, kind schema.GroupVersionKind, namespace, name string, bySelector bool, sel string) ([]map[string]any, error) {
	gvr, err := pc.kinds.gvrOfKind(kind)
	if err != nil {
		return nil, fmt.Errorf("paramKind %w", err)
	}
	ri := pc.client.Resource(gvr)
	var r dynamic.ResourceInterface = ri
	if namespace != "" {
		r = ri.Namespace(namespace)
	}
	if !bySelector {
		obj, err := r.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("get %s %s: %w", gvr.Resource, name, err)
		}
		return []map[string]any{obj.Object}, nil
	}
	list, err := r.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list %s (%s): %w", gvr.Resource, sel, err)
	}
	out := make([]map[string]any, len(list.Items))
	for i := range list.Items {
		out[i] = list.Items[i].Object
	}
	return out, nil
}
