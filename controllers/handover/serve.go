package handover

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API the Hub serves.
const (
	Group            = "kyverno.io"
	Version          = "v2"
	GroupVersion     = Group + "/" + Version
	namespacedPlural = "backgroundscanreports"
	clusterPlural    = "clusterbackgroundscanreports"
)

// kindOf is the kind of a report in namespace ns.
func kindOf(ns string) string {
	if ns == "" {
		return "ClusterBackgroundScanReport"
	}
	return "BackgroundScanReport"
}

// bookmarkInterval is how often an idle watch that asked for bookmarks
// gets one.
const bookmarkInterval = time.Minute

// defaultWatchTimeout ends a watch that gave no timeoutSeconds, as the API
// server's --min-request-timeout does; the client watches again.
const defaultWatchTimeout = 30 * time.Minute

// filter selects the reports of one request.
type filter struct {
	cluster   bool
	namespace string
	sel       labels.Selector
}

func (f filter) matches(o *object) bool {
	if (o.namespace == "") != f.cluster || (f.namespace != "" && o.namespace != f.namespace) {
		return false
	}
	return f.sel == nil || f.sel.Matches(labels.Set(o.labels))
}

func (f filter) kind() string {
	if f.cluster {
		return kindOf("")
	}
	return kindOf("x")
}

// ServeHTTP answers GET requests of the kyverno.io/v2 background report
// kinds (get, list, watch, with labelSelector), the discovery documents
// kubectl reads, and /readyz.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Under IncarnationPath, only this incarnation answers: a merger that
	// reads a hand-over there never mixes in the reports of a later run of
	// the scanner (another shard), which would take reports of its own
	// shard for gone.
	if rest, ok := strings.CutPrefix(r.URL.Path, incarnationsPrefix); ok {
		id, path, _ := strings.Cut(rest, "/")
		if id != h.incarnation {
			writeStatus(w, apierrors.NewResourceExpired(fmt.Sprintf("hand-over incarnation %s is over (now %s): the scanner runs anew", id, h.incarnation)))
			return
		}
		r = r.Clone(r.Context())
		r.URL.Path = "/" + path
	}
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: Group, Resource: namespacedPlural}, r.Method))
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 1 && (parts[0] == "readyz" || parts[0] == "healthz"):
		select {
		case <-h.ready:
			// The incarnation tells the merger a restarted scanner from the
			// one it read.
			_, _ = w.Write([]byte("ok " + h.incarnation)) // a probe that went away needs no answer
		default:
			http.Error(w, "the scanner has not scanned everything yet", http.StatusServiceUnavailable)
		}
		return
	case len(parts) == 1 && parts[0] == "shard":
		// The shard the scanner scans, for the merger beside it: it merges
		// and writes the same namespaces. Unsharded: no members.
		sh := h.shard
		sh.Incarnation = h.incarnation
		if sh.Members == nil {
			sh.Members = []string{}
		}
		writeJSON(w, http.StatusOK, &sh)
		return
	case len(parts) == 1 && parts[0] == "api":
		writeJSON(w, http.StatusOK, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{}})
		return
	case len(parts) == 1 && parts[0] == "apis":
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{apiGroup()}})
		return
	case len(parts) == 2 && parts[0] == "apis" && parts[1] == Group:
		g := apiGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, http.StatusOK, &g)
		return
	case len(parts) == 3 && parts[0] == "apis" && parts[1] == Group && parts[2] == Version:
		verbs := metav1.Verbs{"get", "list", "watch"}
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: GroupVersion,
			APIResources: []metav1.APIResource{
				{Name: namespacedPlural, SingularName: "backgroundscanreport", Namespaced: true, Kind: kindOf("x"), Verbs: verbs, ShortNames: []string{"bgscanr"}},
				{Name: clusterPlural, SingularName: "clusterbackgroundscanreport", Kind: kindOf(""), Verbs: verbs, ShortNames: []string{"cbgscanr"}},
			}})
		return
	}
	if len(parts) < 4 || parts[0] != "apis" || parts[1] != Group || parts[2] != Version {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	rest := parts[3:]
	var f filter
	if rest[0] == "namespaces" && len(rest) >= 3 && rest[2] == namespacedPlural {
		f.namespace, rest = rest[1], rest[2:]
	} else if rest[0] == clusterPlural {
		f.cluster = true
	} else if rest[0] != namespacedPlural || len(rest) > 1 {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: rest[0]}, ""))
		return
	}
	if len(rest) == 2 {
		h.serveGet(w, f, rest[1])
		return
	}
	if len(rest) > 2 {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: rest[0]}, strings.Join(rest[1:], "/")))
		return
	}
	q := r.URL.Query()
	if s := q.Get("labelSelector"); s != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("labelSelector %q: %v", s, err)))
			return
		}
		f.sel = sel
	}
	if v := q.Get("watch"); v == "true" || v == "1" {
		h.serveWatch(w, r, f)
		return
	}
	h.serveList(w, r, f)
}

func apiGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: GroupVersion, Version: Version}
	return metav1.APIGroup{Name: Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

func (h *Hub) serveGet(w http.ResponseWriter, f filter, name string) {
	body, ok := h.Get(f.namespace, name)
	if !ok {
		res := namespacedPlural
		if f.cluster {
			res = clusterPlural
		}
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: res}, name))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body) // a client that went away needs no answer
}

// waitReady blocks until the Hub is ready; false if the request ended first.
func (h *Hub) waitReady(r *http.Request) bool {
	select {
	case <-h.ready:
		return true
	case <-r.Context().Done():
		return false
	}
}

// sorted returns objs by namespace and name.
func sorted(objs []*object) []*object {
	slices.SortFunc(objs, func(a, b *object) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	return objs
}

func (h *Hub) serveList(w http.ResponseWriter, r *http.Request, f filter) {
	if !h.waitReady(r) {
		return
	}
	objs, rv := h.snapshot(f)
	h.metrics.snapshots.Inc()
	h.metrics.snapshotSize.Set(float64(len(objs)))
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 64<<10)
	fmt.Fprintf(bw, `{"apiVersion":%q,"kind":"%sList","metadata":{"resourceVersion":"%d"},"items":[`, GroupVersion, f.kind(), rv)
	var buf []byte
	for i, o := range sorted(objs) {
		if i > 0 {
			_ = bw.WriteByte(',') // a write error is the client gone: Flush says so
		}
		buf = o.body(buf[:0])
		_, _ = bw.Write(buf)
	}
	_, _ = bw.WriteString("]}\n")
	_ = bw.Flush() // the client went away: nothing to tell it
}

// serveWatch streams the changes of the matching reports: from the
// requested version, or (sendInitialEvents, or no version) the current
// reports as ADDED events first, closed by the initial-events-end bookmark
// when asked for.
func (h *Hub) serveWatch(w http.ResponseWriter, r *http.Request, f filter) {
	q := r.URL.Query()
	initial := q.Get("sendInitialEvents") == "true"
	rvParam := q.Get("resourceVersion")
	timeout := defaultWatchTimeout
	if s := q.Get("timeoutSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds %q is not a number of seconds", s)))
			return
		}
		if n > 0 {
			timeout = time.Duration(n) * time.Second
		}
	}
	var cursor uint64
	var snapshot []*object
	if initial || rvParam == "" || rvParam == "0" {
		if !h.waitReady(r) {
			return
		}
		snapshot, cursor = h.snapshot(f)
		h.metrics.snapshots.Inc()
		h.metrics.snapshotSize.Set(float64(len(snapshot)))
	} else {
		v, err := strconv.ParseUint(rvParam, 10, 64)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q is not one of this scanner's", rvParam)))
			return
		}
		if _, _, expired := h.since(v); expired {
			h.metrics.expired.Inc()
			writeStatus(w, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", v)))
			return
		}
		cursor = v
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	send := func() bool {
		err := bw.Flush()
		if flusher != nil {
			flusher.Flush()
		}
		return err == nil
	}
	var buf []byte
	for _, o := range sorted(snapshot) {
		buf = o.body(buf[:0])
		writeEvent(bw, "ADDED", buf)
	}
	if initial {
		writeBookmark(bw, f.kind(), cursor, true)
	}
	if !send() {
		return
	}
	h.trackWatch(&cursor, true)
	defer h.trackWatch(&cursor, false)
	end := h.clock.NewTimer(timeout)
	defer end.Stop()
	var bookmarks <-chan time.Time
	if q.Get("allowWatchBookmarks") == "true" {
		t := h.clock.NewTicker(bookmarkInterval)
		defer t.Stop()
		bookmarks = t.C()
	}
	for {
		evs, changed, expired := h.since(h.cursor(&cursor))
		if expired {
			h.metrics.expired.Inc()
			st := apierrors.NewResourceExpired("the watch fell behind the changes the scanner keeps").ErrStatus
			body, _ := json.Marshal(&st) // a Status always encodes
			writeEvent(bw, "ERROR", body)
			_ = send() // the watch ends either way
			return
		}
		for _, e := range evs {
			if f.matches(e.obj) {
				typ := "MODIFIED"
				switch {
				case e.obj.deleted:
					typ = "DELETED"
				case e.obj.added:
					typ = "ADDED"
				}
				buf = e.obj.body(buf[:0])
				writeEvent(bw, typ, buf)
			}
		}
		if len(evs) > 0 {
			h.setCursor(&cursor, evs[len(evs)-1].rv) // once a batch: the lag metric reads it
			if !send() {
				return
			}
			continue
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-end.C():
			return
		case <-bookmarks:
			writeBookmark(bw, f.kind(), h.cursor(&cursor), false)
			if !send() {
				return
			}
		}
	}
}

// trackWatch adds (or removes) a watch's cursor to those the lag metric
// reads.
func (h *Hub) trackWatch(c *uint64, open bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if open {
		h.watchers[c] = struct{}{}
	} else {
		delete(h.watchers, c)
	}
}

func (h *Hub) cursor(c *uint64) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *c
}

func (h *Hub) setCursor(c *uint64, rv uint64) {
	h.mu.Lock()
	*c = rv
	h.mu.Unlock()
}

// watchState is the number of open watches and the changes the slowest
// has not been sent.
func (h *Hub) watchState() (n int, lag uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.watchers {
		lag = max(lag, h.rv-*c)
	}
	return len(h.watchers), lag
}

func writeEvent(bw *bufio.Writer, typ string, body []byte) {
	// Write errors surface at the next Flush.
	_, _ = bw.WriteString(`{"type":"` + typ + `","object":`)
	_, _ = bw.Write(body)
	_, _ = bw.WriteString("}\n")
}

func writeBookmark(bw *bufio.Writer, kind string, rv uint64, initialEnd bool) {
	md := map[string]any{"resourceVersion": strconv.FormatUint(rv, 10)}
	if initialEnd {
		md["annotations"] = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	body, _ := json.Marshal(map[string]any{"apiVersion": GroupVersion, "kind": kind, "metadata": md}) // strings always encode
	writeEvent(bw, "BOOKMARK", body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body) // a client that went away needs no answer
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(st.Code), &st)
}

// Serve answers on l until ctx ends. Open watches end with it.
func (h *Hub) Serve(ctx context.Context, l net.Listener) error { return serveOn(ctx, l, h) }

const incarnationsPrefix = "/incarnations/"

// IncarnationPath is the path under which only the Hub of an incarnation
// (as /readyz and /shard answer it) serves: a client whose host ends with
// it reads that run's reports or an error, never a later run's.
func IncarnationPath(incarnation string) string { return incarnationsPrefix + incarnation }

// Switch serves the Hub of the scanner's current run: a sharded scanner
// runs anew, with a Hub of its own, on each shard it is given. Until the
// first is set, it answers 503 (not ready).
type Switch struct{ current atomic.Pointer[Hub] }

// Set makes h the Hub served.
func (s *Switch) Set(h *Hub) { s.current.Store(h) }

func (s *Switch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := s.current.Load()
	if h == nil {
		http.Error(w, "the scanner has not started yet", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// Serve serves the current Hub on l until ctx ends.
func (s *Switch) Serve(ctx context.Context, l net.Listener) error { return serveOn(ctx, l, s) }

func serveOn(ctx context.Context, l net.Listener, handler http.Handler) error {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		// The run's context has ended: the shutdown gets a bound of its own.
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown) // best effort: watches end with ctx already
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
