package data

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/internal/tenant"
)

// DefaultTenantServiceAccount is the ServiceAccount, in each namespace,
// whose identity tally takes for the cluster reads of that namespace's
// policies (tally-scanner --tenant-service-account).
const DefaultTenantServiceAccount = "tally-tenant"

// Tenant QPS and burst: each namespace's identity has a client of its own,
// with this rate limit: one tenant's policies cannot spend the API budget
// of tally's own client (or of another tenant).
const (
	tenantQPS   = 5
	tenantBurst = 10
)

// Clients are the clients of one identity.
type Clients struct {
	Dynamic dynamic.Interface
	REST    rest.Interface
	Kube    kubernetes.Interface
	// User is the user name the API server sees ("" for tally's own).
	User string
}

// Tenants gives the clients a namespaced policy's cluster reads and writes
// go through: the identity of its namespace, never tally's (R47). The API
// server's RBAC then decides what the policy may read.
type Tenants interface {
	For(namespace string) (*Clients, error)
}

// ErrNoTenantIdentity is the error of a namespaced policy's cluster read
// when tally takes no identity for tenants.
var ErrNoTenantIdentity = errors.New("a namespaced policy reads nothing of the cluster here: tally-scanner has no --tenant-service-account (no call made)")

// ErrOutsideNamespace is the refusal of a request of a tenant's client
// whose path, as sent, leaves its namespace.
var ErrOutsideNamespace = errors.New("outside the policy's namespace (no call made)")

// Impersonating is the Tenants of a cluster: each namespace's clients
// impersonate the ServiceAccount named ServiceAccount in that namespace
// (tally may impersonate that name only: config/rbac), and refuse to send
// a request whose path leaves the namespace. The ServiceAccount need not
// exist: what it may do is what RoleBindings grant its name
// (docs/security.md).
type Impersonating struct {
	Config         *rest.Config
	ServiceAccount string

	mu   sync.Mutex
	byNS map[string]*Clients
}

// maxTenantClients bounds the clients kept (one per namespace whose
// policies read the cluster); past it they are made again.
const maxTenantClients = 4096

// UserOf is the user name of a namespace's identity.
func UserOf(namespace, serviceAccount string) string {
	return "system:serviceaccount:" + namespace + ":" + serviceAccount
}

// For implements Tenants.
func (t *Impersonating) For(namespace string) (*Clients, error) {
	if t == nil || t.ServiceAccount == "" {
		return nil, ErrNoTenantIdentity
	}
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", namespace, msgs[0])
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.byNS[namespace]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(t.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: UserOf(namespace, t.ServiceAccount)}
	cfg.QPS, cfg.Burst = tenantQPS, tenantBurst
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &namespaceGuard{ns: namespace, next: rt} })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the client of namespace %s: %w", namespace, err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("the client of namespace %s: %w", namespace, err)
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("the client of namespace %s: %w", namespace, err)
	}
	c := &Clients{Dynamic: dyn, REST: kube.Discovery().RESTClient(), Kube: kube, User: cfg.Impersonate.UserName}
	if t.byNS == nil || len(t.byNS) >= maxTenantClients {
		t.byNS = map[string]*Clients{}
	}
	t.byNS[namespace] = c
	return c, nil
}

// namespaceGuard refuses, on the wire, a tenant's request whose path (as
// sent, escaped) is not of its namespace: whatever built the request, and
// however it spelled it, nothing else is sent with the tenant's identity.
type namespaceGuard struct {
	ns   string
	next http.RoundTripper
}

func (g *namespaceGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if p := r.URL.EscapedPath(); r.URL.RawFragment != "" || r.URL.Fragment != "" || !engine.InNamespacePath(p, g.ns) {
		return nil, fmt.Errorf("%s %s: %w", r.Method, p, ErrOutsideNamespace)
	}
	return g.next.RoundTrip(r)
}

// clientsFor are the clients a read of ctx's evaluation goes through:
// tally's own for the platform's policies, the namespace's identity for a
// namespaced one. as names the identity in cache keys ("" for tally's).
func (l *Loader) clientsFor(ctx context.Context) (c *Clients, as string, err error) {
	ns := tenant.Of(ctx)
	if ns == "" {
		return &Clients{Dynamic: l.client, REST: l.rest}, "", nil
	}
	if l.opts.Tenants == nil {
		return nil, "", ErrNoTenantIdentity
	}
	c, err = l.opts.Tenants.For(ns)
	if err != nil {
		return nil, "", err
	}
	return c, " as " + c.User, nil
}

// Own is the Tenants of a client that reads as itself for every namespace
// (the CLI's --cluster: the user's own rights); the engine's checks of a
// namespaced policy's paths still apply.
type Own Clients

// For implements Tenants.
func (o *Own) For(string) (*Clients, error) { return (*Clients)(o), nil }
