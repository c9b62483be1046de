package handover

import (
	"bytes"
	"encoding/json"
	"fmt"
	"k8s.io/utils/clock"
	"strconv"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Report is one BackgroundScanReport (namespace set) or
// ClusterBackgroundScanReport as handed over: typed metadata and the spec
// already encoded, never an unstructured map.
type Report struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   Meta            `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
}

// Meta is a report's metadata. The Hub sets ResourceVersion and
// CreationTimestamp.
type Meta struct {
	Name              string                  `json:"name"`
	Namespace         string                  `json:"namespace,omitempty"`
	ResourceVersion   string                  `json:"resourceVersion,omitempty"`
	CreationTimestamp metav1.Time             `json:"creationTimestamp"`
	Labels            map[string]string       `json:"labels,omitempty"`
	Annotations       map[string]string       `json:"annotations,omitempty"`
	OwnerReferences   []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// DefaultMaxEvents and DefaultMaxEventBytes bound the recent changes a Hub
// keeps for watches that resume (a watcher further behind lists again): at
// most twice as many changes, and bodies of twice as many bytes, before the
// older half goes. The merger beside the scanner reads each change within
// microseconds; the window is for a watch that reconnects.
const (
	DefaultMaxEvents     = 4096
	DefaultMaxEventBytes = 1 << 20
)

type key struct{ namespace, name string }

// object is a report as held: its encoded body, compressed, and what
// selectors need.
type object struct {
	namespace, name string
	labels          map[string]string
	created         metav1.Time
	rv              uint64
	// packed is the JSON body, S2-compressed: a BackgroundScanReport's
	// results repeat their rules' names and messages, and 10,000 of them
	// would otherwise hold about 65 MiB (docs/benchmarks.md).
	packed []byte
	// added says the change created the report; deleted that it removed
	// it (the body is then its metadata only).
	added, deleted bool
}

func newObject(namespace, name string, labels map[string]string, created metav1.Time, rv uint64, body []byte) *object {
	// Encode returns a slice of a buffer of the largest encoded length:
	// what is kept is a copy of the size it needs.
	return &object{namespace: namespace, name: name, labels: labels, created: created, rv: rv, packed: bytes.Clone(s2.Encode(nil, body))}
}

// body decodes the JSON body, into buf's storage when it is large enough.
func (o *object) body(buf []byte) []byte {
	out, err := s2.Decode(buf[:cap(buf)], o.packed)
	if err != nil {
		panic(fmt.Sprintf("handover: a body it compressed itself does not decode: %v", err))
	}
	return out
}

// event is one change, in resource-version order.
type event struct {
	rv  uint64
	obj *object
}

// Hub holds the current BackgroundScanReports of one scanner and the
// recent changes to them. Its methods are safe for concurrent use.
type Hub struct {
	now       func() time.Time
	maxEvents int
	maxBytes  int
	metrics   *metrics

	// shard is Options.Shard.
	shard Shard
	// incarnation tells this Hub from the one of an earlier run of the
	// scanner (its first resource version); /readyz answers it.
	incarnation string

	mu      sync.Mutex
	rv      uint64
	objects map[key]*object
	events  []event // events[i].rv == first+i
	first   uint64
	// eventBytes is the size of the events' bodies.
	eventBytes int
	changed    chan struct{} // closed (and replaced) at every change
	// watchers are the open watches and the version each has sent.
	watchers map[*uint64]struct{}
	ready    chan struct{} // closed by SetReady
	clock    clock.WithTicker
	readyAt  time.Time
}

// Options configure a Hub.
type Options struct {
	// MaxEvents and MaxEventBytes bound the changes kept for resuming
	// watches (default DefaultMaxEvents, DefaultMaxEventBytes).
	MaxEvents, MaxEventBytes int
	// Registry receives the hand-over metrics (nil: none).
	Registry prometheus.Registerer
	// Now is the clock (default time.Now); Clock times the watches it
	// serves (default the real clock).
	Now   func() time.Time
	Clock clock.WithTicker
	// Shard is the shard the scanner scans in this run (served at /shard
	// for the merger beside it): none when unsharded.
	Shard Shard
}

// Shard is a sharded scanner's view of the live members: it scans the
// namespaces Self owns among Members (shard.Owner).
type Shard struct {
	Self    string   `json:"self"`
	Members []string `json:"members"`
	// Incarnation is the Hub's (as /readyz answers it), set when served.
	Incarnation string `json:"incarnation,omitempty"`
}

// New returns an empty Hub, not ready.
func New(o Options) *Hub {
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultMaxEventBytes
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// Versions start at the time of creation in microseconds: a version
	// of an earlier incarnation (a restarted scanner) is below every
	// version this one holds, and a watch from it is answered Gone.
	base := uint64(o.Now().UnixMicro())
	h := &Hub{clock: o.Clock, shard: o.Shard, incarnation: strconv.FormatUint(base, 10), now: o.Now, maxEvents: o.MaxEvents, maxBytes: o.MaxEventBytes, objects: map[key]*object{}, watchers: map[*uint64]struct{}{}, rv: base, first: base + 1,
		changed: make(chan struct{}), ready: make(chan struct{})}
	h.metrics = newMetrics(o.Registry, h)
	return h
}

// Put stores r (its namespace and name key it) as the current report of
// its resource, and tells the watchers.
func (h *Hub) Put(r *Report) error {
	k := key{r.Metadata.Namespace, r.Metadata.Name}
	h.mu.Lock()
	defer h.mu.Unlock()
	created := metav1.NewTime(h.now().Truncate(time.Second))
	prev := h.objects[k]
	if prev != nil {
		created = prev.created
	}
	rv := h.rv + 1
	r.Metadata.ResourceVersion = strconv.FormatUint(rv, 10)
	r.Metadata.CreationTimestamp = created
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode %s %s/%s: %w", r.Kind, k.namespace, k.name, err)
	}
	o := newObject(k.namespace, k.name, r.Metadata.Labels, created, rv, body)
	o.added = prev == nil
	h.objects[k] = o
	h.metrics.puts.Inc()
	h.appendLocked(o)
	return nil
}

// Delete removes the report of namespace/name, if held, and tells the
// watchers.
func (h *Hub) Delete(namespace, name string) {
	k := key{namespace, name}
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.objects[k]
	if prev == nil {
		return
	}
	delete(h.objects, k)
	rv := h.rv + 1
	tomb := Report{APIVersion: GroupVersion, Kind: kindOf(namespace),
		Metadata: Meta{Name: name, Namespace: namespace, ResourceVersion: strconv.FormatUint(rv, 10), CreationTimestamp: prev.created, Labels: prev.labels}}
	body, err := json.Marshal(&tomb)
	if err != nil {
		panic(err) // strings and a map of strings always encode
	}
	h.metrics.deletes.Inc()
	o := newObject(namespace, name, prev.labels, prev.created, rv, body)
	o.deleted = true
	h.appendLocked(o)
}

// appendLocked records a change and wakes the watchers. Callers hold h.mu.
func (h *Hub) appendLocked(o *object) {
	h.rv = o.rv
	h.events = append(h.events, event{rv: o.rv, obj: o})
	h.eventBytes += len(o.packed)
	if len(h.events) > 2*h.maxEvents || h.eventBytes > 2*h.maxBytes {
		drop := 0
		for drop < len(h.events)-1 && (len(h.events)-drop > h.maxEvents || h.eventBytes > h.maxBytes) {
			h.eventBytes -= len(h.events[drop].obj.packed)
			drop++
		}
		h.events = append([]event(nil), h.events[drop:]...)
		h.first += uint64(drop)
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// Get returns the encoded report of namespace/name.
func (h *Hub) Get(namespace, name string) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.objects[key{namespace, name}]; o != nil {
		return o.body(nil), true
	}
	return nil, false
}

// Len is the number of reports held.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.objects)
}

// SetReady says the reports reflect a complete scan: lists and watches
// waiting for it are answered. Later calls do nothing.
func (h *Hub) SetReady() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.ready:
	default:
		h.readyAt = h.now()
		close(h.ready)
	}
}

// Ready is closed once SetReady was called.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// snapshot returns the objects of a kind (cluster: the cluster-scoped one)
// in namespace ns ("" all) that sel matches, and the resource version they
// are current at.
func (h *Hub) snapshot(f filter) ([]*object, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*object, 0, len(h.objects))
	for _, o := range h.objects {
		if f.matches(o) {
			out = append(out, o)
		}
	}
	return out, h.rv
}

// since returns the changes after rv, and a channel closed at the next
// change; expired is true when changes after rv are no longer held (or rv
// is of another incarnation).
func (h *Hub) since(rv uint64) (evs []event, changed <-chan struct{}, expired bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rv > h.rv || rv+1 < h.first {
		return nil, nil, true
	}
	return h.events[rv+1-h.first:], h.changed, false
}
