package data

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

// apiCall.service calls a service over TLS with the entry's CA bundle and
// headers, only when the URL is allowed; each distinct call is made once
// per CallTTL; a refused URL, an error status and a timeout are errors
// naming the call.
func TestServiceCalls(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch r.URL.Path {
		case "/slow":
			<-r.Context().Done() // answers only once the caller has given up
			return
		case "/broken":
			http.Error(w, "no such team", http.StatusNotFound)
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "method": r.Method, "token": r.Header.Get("X-Token"), "body": body})
	}))
	defer srv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	l := New(nil, nil, Options{HTTP: HTTPOptions{Allow: []string{srv.URL + "/teams/*", srv.URL + "/slow", srv.URL + "/broken"}, Timeout: 500 * time.Millisecond}})
	entry := func(path, method, jmesPath string, data string) kyvernov1.ContextEntry {
		svc, _ := json.Marshal(map[string]any{"url": srv.URL + path, "caBundle": ca,
			"headers": []map[string]string{{"key": "X-Token", "value": "{{ request.namespace }}"}}})
		call := &kyvernov1.ContextAPICall{Method: method, JMESPath: jmesPath, Service: &apiextv1.JSON{Raw: svc}}
		if data != "" {
			call.Data = &apiextv1.JSON{Raw: []byte(data)}
		}
		return kyvernov1.ContextEntry{Name: "x", APICall: call}
	}
	ctx := context.Background()
	vars := map[string]any{"request": map[string]any{"namespace": "shop"}}
	for i := 0; i < 3; i++ {
		got, err := l.Load(ctx, "p", entry("/teams/{{ request.namespace }}", "", "token", ""), vars)
		if err != nil || got != "shop" {
			t.Fatalf("GET: got %v, %v", got, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("3 loads made %d calls, want 1", n)
	}
	got, err := l.Load(ctx, "p", entry("/teams/a", "POST", "body.team", `[{"key": "team", "value": "{{ request.namespace }}"}]`), vars)
	if err != nil || got != "shop" {
		t.Errorf("POST: got %v, %v", got, err)
	}
	for path, want := range map[string]string{
		"/other":  "calls to services are not allowed: allow the URL with tally-scanner --http-allow",
		"/broken": "HTTP 404: no such team",
		"/slow":   "Client.Timeout exceeded",
	} {
		if _, err := l.Load(ctx, "p", entry(path, "", "", ""), vars); err == nil || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "failed to fetch data for APICall: GET "+srv.URL+path) {
			t.Errorf("%s: error %v, want one naming the call and %q", path, err, want)
		}
	}
	noCA := New(nil, nil, Options{HTTP: HTTPOptions{Allow: []string{srv.URL + "/*"}}})
	if _, err := noCA.HTTPCall(ctx, "GET", srv.URL+"/teams/a", nil, nil, ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server the CA bundle does not vouch for: %v", err)
	}
}
