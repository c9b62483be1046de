package data

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/internal/tenant"
)

// apiServer records the requests it is sent: their paths and the user
// they impersonate.
type apiServer struct {
	mu   sync.Mutex
	seen []string
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Method+" "+r.URL.EscapedPath()+" as "+r.Header.Get("Impersonate-User"))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "ConfigMap", "apiVersion": "v1", "metadata": map[string]any{"name": "x"}, "data": map[string]any{"path": r.URL.Path}})
}

func (a *apiServer) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// Issue 53: a namespaced policy's reads go out with its namespace's
// identity, and its client sends nothing outside that namespace, however
// the request was built; the platform's reads and a tenant's never share
// an answer.
func TestTenantReadsImpersonateTheirNamespace(t *testing.T) {
	srv := &apiServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	cfg := &rest.Config{Host: ts.URL}
	kube := kubernetes.NewForConfigOrDie(cfg)
	l := New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), kube.Discovery().RESTClient(), Options{
		Tenants: &Impersonating{Config: cfg, ServiceAccount: "tally-tenant"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = l.Run(ctx) }()

	call := func(ctx context.Context, path string) error {
		_, err := l.Load(ctx, "team-a/p", kyvernov1.ContextEntry{Name: "x", APICall: &kyvernov1.ContextAPICall{URLPath: path}}, map[string]any{})
		return err
	}
	teamA := tenant.With(ctx, "team-a")
	if err := call(teamA, "/api/v1/namespaces/team-a/configmaps/settings"); err != nil {
		t.Fatal(err)
	}
	if err := call(ctx, "/api/v1/namespaces/team-a/configmaps/settings"); err != nil { // the platform's: not the tenant's answer
		t.Fatal(err)
	}
	for _, attack := range []string{
		"/api/v1/namespaces/team-a/configmaps/x#/../../../../api/v1/namespaces/team-b/configmaps/y",
		"/api/v1/namespaces/team-b/configmaps/y",
		"/api/v1/namespaces/team-a/../team-b/configmaps/y",
		"/api/v1/namespaces/team-a/configmaps/%2e%2e/%2e%2e/team-b",
		"/api/v1/nodes",
		"/api/v1/namespaces/team-a/configmaps?watch=true",
	} {
		if err := call(teamA, attack); err == nil {
			t.Errorf("%s: read", attack)
		}
	}
	if _, err := l.GetResource(teamA, "v1", "configmaps", "team-a", "settings"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /api/v1/namespaces/team-a/configmaps/settings as system:serviceaccount:team-a:tally-tenant",
		"GET /api/v1/namespaces/team-a/configmaps/settings as ",
		"GET /api/v1/namespaces/team-a/configmaps/settings as system:serviceaccount:team-a:tally-tenant",
	}
	if got := srv.requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// On the wire: whatever builds a tenant's request, one outside its
	// namespace is not sent.
	c, err := (&Impersonating{Config: cfg, ServiceAccount: "tally-tenant"}).For("team-a")
	if err != nil {
		t.Fatal(err)
	}
	before := len(srv.requests())
	for _, p := range []string{"/api/v1/namespaces/team-b/secrets", "/api/v1/secrets", "/api/v1/namespaces/team-a/../team-b/secrets"} {
		_, err := c.REST.Get().AbsPath(p).DoRaw(ctx)
		if !errors.Is(err, ErrOutsideNamespace) {
			t.Errorf("%s: %v, want ErrOutsideNamespace", p, err)
		}
	}
	if got := len(srv.requests()); got != before {
		t.Errorf("%d requests outside the namespace were sent", got-before)
	}
	if _, err := (&Impersonating{Config: cfg, ServiceAccount: "tally-tenant"}).For("team-a/../x"); err == nil {
		t.Error("a client was made for a namespace that is not a name")
	}
	// Without a tenant identity, a tenant reads nothing.
	none := New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), kube.Discovery().RESTClient(), Options{})
	go func() { _ = none.Run(ctx) }()
	if _, err := none.GetResource(teamA, "v1", "configmaps", "team-a", "settings"); !errors.Is(err, ErrNoTenantIdentity) {
		t.Errorf("no tenant identity: %v", err)
	}
}
