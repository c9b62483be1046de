// Package sigverify verifies the cosign signatures and in-toto attestations
// of container images for classic verifyImages rules (R41), with
// sigstore's cosign packages and go-containerregistry, and pays for each
// verification once (R43): outcomes are cached by (rule entry, image
// digest), tag-to-digest resolutions for less, concurrent checks of one
// key wait for one verification, registry requests are rate-limited per
// registry, and a registry that cannot be reached is remembered for a
// while, so that a down registry costs each result that needs it one fast
// error and nothing else any time.
package sigverify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore-go/pkg/root"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"k8s.io/utils/lru"

	"github.com/tally-dev/tally/engine/imageverify"
	"github.com/tally-dev/tally/internal/tenant"
)

// Options configure a Verifier; zero values take the defaults.
type Options struct {
	// TTL is how long a verified outcome is reused (default 60m, as
	// Kyverno's cache); a failed one is reused for DigestTTL.
	TTL time.Duration
	// DigestTTL is how long a tag's digest is reused (default 5m).
	DigestTTL time.Duration
	// DownTTL is how long a registry that could not be reached is not
	// asked again (default 30s): its checks are errors meanwhile.
	DownTTL time.Duration
	// Entries bounds the outcome cache (default 10,000).
	Entries int
	// RequestsPerSecond and Burst limit the requests to one registry
	// (defaults 20 and 40; a negative RequestsPerSecond: no limit).
	RequestsPerSecond float64
	Burst             int
	// TrustedRoot is the Sigstore trust root keyless signatures are
	// verified against when the attestor names no roots (default: the
	// public one, read from its TUF repository, as cosign and Kyverno read
	// it; tally-scanner and tally --sigstore-trusted-root name a
	// trusted_root.json instead). An error is the error result of the
	// checks that need it.
	TrustedRoot func() (root.TrustedMaterial, error)
	// Timeout bounds one verification (default 30s).
	Timeout time.Duration
	// Keychain gives registry credentials (default: the docker config of
	// the process' user, else anonymous).
	Keychain authn.Keychain
	// SecretKeychain, when set, gives the credentials of the Secrets an
	// entry's imageRegistryCredentials name (in the verifier's namespace,
	// as Kyverno reads them from its own), before Keychain.
	SecretKeychain func(ctx context.Context, secrets []string) (authn.Keychain, error)
	// SecretData reads a Secret's data (keys.secret: the public keys under
	// cosign.pub); nil: such keys are an error.
	SecretData func(ctx context.Context, namespace, name string) (map[string][]byte, error)
	// PodKeychain reads the credentials of a resource's imagePullSecrets
	// from its namespace (nil: they are not read).
	PodKeychain func(ctx context.Context, namespace string, secrets []string) (authn.Keychain, error)
	// Transport is the HTTP transport under the rate limit (default
	// remote.DefaultTransport).
	Transport http.RoundTripper
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Verified, when set, is told of each verification run (not served
	// from the cache): the check's policy and the result.
	Verified func(policy, result string)
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.TTL, time.Hour)
	def(&o.DigestTTL, 5*time.Minute)
	def(&o.DownTTL, 30*time.Second)
	def(&o.Timeout, 30*time.Second)
	if o.Entries == 0 {
		o.Entries = 10000
	}
	if o.RequestsPerSecond == 0 {
		o.RequestsPerSecond = 20
	}
	if o.Burst == 0 {
		o.Burst = 40
	}
	if o.Keychain == nil {
		o.Keychain = authn.DefaultKeychain
	}
	if o.Transport == nil {
		o.Transport = remote.DefaultTransport
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TrustedRoot == nil {
		o.TrustedRoot = func() (root.TrustedMaterial, error) { return cosign.TrustedRoot() }
	}
}

// TrustedRootFile is a TrustedRoot read from a trusted_root.json (cosign's
// --trusted-root): read once, its error returned to every check.
func TrustedRootFile(path string) func() (root.TrustedMaterial, error) {
	tr, err := root.NewTrustedRootFromPath(path)
	return func() (root.TrustedMaterial, error) {
		if err != nil {
			return nil, fmt.Errorf("trusted root %s: %w", path, err)
		}
		return tr, nil
	}
}

// Verifier verifies images; it is safe for concurrent use.
type Verifier struct {
	opts      Options
	transport *limitedTransport
	outcomes  *lru.Cache // key -> cached
	digests   *lru.Cache // reference -> cachedDigest
	flights   singleflight.Group

	mu   sync.Mutex
	down map[string]downEntry // registry -> why and until when
	// transports are handshaken transports by repository.
	transports map[string]handshaken

	verifications atomic.Int64
}

type cached struct {
	outcome imageverify.Outcome
	until   time.Time
}

type cachedDigest struct {
	digest string
	until  time.Time
}

type downEntry struct {
	err   error
	until time.Time
}

// New makes a Verifier.
func New(o Options) *Verifier {
	o.defaults()
	return &Verifier{
		opts:       o,
		transport:  &limitedTransport{next: o.Transport, rps: o.RequestsPerSecond, burst: o.Burst, limiters: map[string]*rate.Limiter{}},
		outcomes:   lru.New(o.Entries),
		digests:    lru.New(o.Entries),
		down:       map[string]downEntry{},
		transports: map[string]handshaken{},
	}
}

// Requests is the number of HTTP requests sent to registries so far.
func (v *Verifier) Requests() int64 { return v.transport.requests.Load() }

// Verifications is the number of verifications run (not served from the cache).
func (v *Verifier) Verifications() int64 { return v.verifications.Load() }

// Verify checks one image against one verifyImages entry.
func (v *Verifier) Verify(ctx context.Context, c imageverify.Check) imageverify.Outcome {
	ctx, ref, registry, digest, err := v.resolve(ctx, c)
	if err != nil {
		return v.failed(c.Image, err)
	}
	key := c.Identity + "\x00" + ref.Context().Name() + "@" + digest
	useCache := imageverify.On(c.Entry.UseCache)
	image := c.Image
	if c.NameDigest && digest != "" {
		image = WithDigest(image, digest)
	}
	if useCache {
		if o, ok := v.cachedOutcome(key); ok {
			return forResource(o, image)
		}
	}
	res, _, _ := v.flights.Do(key, func() (any, error) {
		if useCache {
			if o, ok := v.cachedOutcome(key); ok {
				return o, nil
			}
		}
		v.verifications.Add(1)
		vctx, cancel := context.WithTimeout(ctx, v.opts.Timeout)
		defer cancel()
		// Verified for any reference to the digest: its messages name
		// the image as a placeholder, which each check's own reference
		// replaces (forResource).
		generic := c
		generic.Image = imagePlaceholder
		o := v.verify(vctx, generic, ref.Context().Digest(digest), registry)
		o.Digest = digest
		if v.opts.Verified != nil {
			v.opts.Verified(c.Policy, o.Result)
		}
		if o.Result != resultError && useCache {
			ttl := v.opts.TTL
			if o.Result != resultPass {
				ttl = v.opts.DigestTTL // a signature may come: ask again sooner
			}
			v.outcomes.Add(key, cached{outcome: o, until: v.opts.Now().Add(ttl)})
		}
		return o, nil
	})
	return forResource(res.(imageverify.Outcome), image)
}

// imagePlaceholder stands for the image in the messages of an outcome
// verified for a digest; forResource writes the check's own reference in.
const imagePlaceholder = "\x00image\x00"

// imageDigestPlaceholder stands for the image as Kyverno names it once its
// digest is known (registry/path@digest: an attestation verified after the
// entry's signatures, as Kyverno's verifyImage sets the digest it got from
// the signatures).
const imageDigestPlaceholder = "\x00image@digest\x00"

// forResource is an outcome as reported for a resource whose reference to
// the image is image (Kyverno's ImageInfo string: the tag, or the digest
// when the reference names one): two Pods running the same digest, one by
// tag and one by digest, each get their own reference in their messages.
func forResource(o imageverify.Outcome, image string) imageverify.Outcome {
	if !strings.Contains(o.Message, "\x00") {
		return o
	}
	withDigest := image
	if o.Digest != "" {
		withDigest = WithDigest(image, o.Digest)
	}
	o.Message = strings.NewReplacer(imageDigestPlaceholder, withDigest, imagePlaceholder, image).Replace(o.Message)
	return o
}

// WithDigest is an image, as Kyverno names it (registry/path:tag or
// registry/path@digest), with its tag replaced by digest:
// registry/path@digest.
func WithDigest(image, digest string) string {
	if i := strings.LastIndex(image, "@"); i >= 0 {
		return image // names its digest already
	}
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}
	return repo + "@" + digest
}

// Resolve reads an image's digest from its registry (cached for
// DigestTTL; a digest reference is its own), with the check's credentials:
// what an ImageValidatingPolicy asks of every image it selects before its
// validations run (R42). The error of a registry that does not answer is
// Unreachable.
func (v *Verifier) Resolve(ctx context.Context, c imageverify.Check) (string, error) {
	_, _, _, digest, err := v.resolve(ctx, c)
	return digest, err
}

// resolve parses the check's image and reads its digest, with the check's
// credentials (carried in the context returned): what Verify and Resolve
// share. A registry known to be down is not asked; one that does not
// answer is noted down.
func (v *Verifier) resolve(ctx context.Context, c imageverify.Check) (context.Context, name.Reference, string, string, error) {
	var opts []name.Option
	if rc := c.Entry.ImageRegistryCredentials; rc != nil && rc.AllowInsecureRegistry {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(c.Image, opts...)
	if err != nil {
		return ctx, nil, "", "", err
	}
	registry := ref.Context().RegistryStr()
	if err := v.isDown(registry); err != nil {
		return ctx, ref, registry, "", err
	}
	if c.Tenant {
		ctx = context.WithValue(ctx, tenantKey{}, true)
	}
	ctx = v.withKeychain(ctx, c)
	digest, err := v.digestOf(ctx, ref)
	return ctx, ref, registry, digest, v.noteDown(registry, err)
}

const (
	resultPass  = "pass"
	resultFail  = "fail"
	resultError = "error"
)

func (v *Verifier) cachedOutcome(key string) (imageverify.Outcome, bool) {
	e, ok := v.outcomes.Get(key)
	if !ok {
		return imageverify.Outcome{}, false
	}
	c := e.(cached)
	if v.opts.Now().After(c.until) {
		v.outcomes.Remove(key)
		return imageverify.Outcome{}, false
	}
	o := c.outcome
	o.Cached = true
	return o, true
}

// digestOf resolves a tag to its digest (cached for DigestTTL); a digest
// reference is its own.
func (v *Verifier) digestOf(ctx context.Context, ref name.Reference) (string, error) {
	if d, ok := ref.(name.Digest); ok {
		return d.DigestStr(), nil
	}
	key := ref.Name()
	if l, ok := ctx.Value(keychainKey{}).(*lazyKeychain); ok {
		key += "\x00" + l.id
	}
	if e, ok := v.digests.Get(key); ok {
		c := e.(cachedDigest)
		if !v.opts.Now().After(c.until) {
			return c.digest, nil
		}
	}
	d, err, _ := v.flights.Do("digest\x00"+key, func() (any, error) {
		opts, err := v.remoteOptions(ctx, ref.Context())
		if err != nil {
			return "", err
		}
		desc, err := remote.Head(ref, opts...)
		if err != nil {
			return "", err
		}
		digest := desc.Digest.String()
		v.digests.Add(key, cachedDigest{digest: digest, until: v.opts.Now().Add(v.opts.DigestTTL)})
		return digest, nil
	})
	if err != nil {
		return "", err
	}
	return d.(string), nil
}

// remoteOptions are go-containerregistry's options for reading repo: a
// transport that has already done the registry's handshake (ping, token)
// for it, reused for DigestTTL, so that each verification costs only the
// requests of its manifests and blobs.
func (v *Verifier) remoteOptions(ctx context.Context, repo name.Repository) ([]remote.Option, error) {
	rt, err := v.transportFor(ctx, repo)
	if err != nil {
		return nil, err
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(rt)}, nil
}

// transportFor is the handshaken transport for reading repo, with the
// check's credentials (its Secrets' keychain, else the default one).
func (v *Verifier) transportFor(ctx context.Context, repo name.Repository) (http.RoundTripper, error) {
	kc := v.opts.Keychain
	l, secrets := ctx.Value(keychainKey{}).(*lazyKeychain)
	if secrets {
		kc = l.get(ctx)
	}
	return v.handshake(ctx, repo, kc, !secrets)
}

type handshaken struct {
	rt    http.RoundTripper
	until time.Time
}

// handshake is an authenticated transport for pulling from repo; shared
// ones (the default keychain's) are kept for DigestTTL.
func (v *Verifier) handshake(ctx context.Context, repo name.Repository, kc authn.Keychain, share bool) (http.RoundTripper, error) {
	key := repo.Registry.Scheme() + "://" + repo.Name()
	if share {
		v.mu.Lock()
		h, ok := v.transports[key]
		v.mu.Unlock()
		if ok && v.opts.Now().Before(h.until) {
			return h.rt, nil
		}
	}
	auth, err := kc.Resolve(repo)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", repo, err)
	}
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, v.transport, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	if share {
		v.mu.Lock()
		if len(v.transports) > v.opts.Entries {
			clear(v.transports)
		}
		v.transports[key] = handshaken{rt: rt, until: v.opts.Now().Add(v.opts.DigestTTL)}
		v.mu.Unlock()
	}
	return rt, nil
}

type keychainKey struct{}

// tenantKey marks the checks of a namespaced Policy.
type tenantKey struct{}

// withKeychain carries in ctx the credentials of the check: the
// resource's imagePullSecrets (from its namespace, when the verifier reads
// them), then the entry's Secrets (tally's namespace; never for a tenant's
// policy), before the default ones; read only if a registry is asked
// (never on a cache hit).
func (v *Verifier) withKeychain(ctx context.Context, c imageverify.Check) context.Context {
	var reads []func(context.Context) (authn.Keychain, error)
	var id []string
	if len(c.PullSecrets) > 0 && c.Namespace != "" && v.opts.PodKeychain != nil {
		ns, names := c.Namespace, c.PullSecrets
		reads = append(reads, func(ctx context.Context) (authn.Keychain, error) { return v.opts.PodKeychain(ctx, ns, names) })
		id = append(id, "pod:"+ns+"/"+strings.Join(names, ",")+" as "+tenant.Of(ctx))
	}
	tenant, _ := ctx.Value(tenantKey{}).(bool) // a tenant's policy borrows none of tally's credentials
	if rc := c.Entry.ImageRegistryCredentials; rc != nil && len(rc.Secrets) > 0 && v.opts.SecretKeychain != nil && !tenant {
		secrets := rc.Secrets
		reads = append(reads, func(ctx context.Context) (authn.Keychain, error) { return v.opts.SecretKeychain(ctx, secrets) })
		id = append(id, "entry:"+strings.Join(secrets, ","))
	}
	if len(reads) == 0 {
		return ctx
	}
	return context.WithValue(ctx, keychainKey{}, &lazyKeychain{reads: reads, fallback: v.opts.Keychain, id: strings.Join(id, "\x00")})
}

// lazyKeychain reads the check's Secrets once, when first needed. Secrets
// that cannot be read leave the others and the default credentials, and
// the registry's answer (unauthorized) says the rest.
type lazyKeychain struct {
	once  sync.Once
	reads []func(context.Context) (authn.Keychain, error)
	// id names the credentials, so that what one set of them read is not
	// served to a check without them.
	id       string
	fallback authn.Keychain
	kc       authn.Keychain
}

func (l *lazyKeychain) get(ctx context.Context) authn.Keychain {
	l.once.Do(func() {
		var kcs []authn.Keychain
		for _, read := range l.reads {
			if k, err := read(ctx); err == nil {
				kcs = append(kcs, k)
			}
		}
		l.kc = authn.NewMultiKeychain(append(kcs, l.fallback)...)
	})
	return l.kc
}

// failed is the outcome of an error: an error result when the registry
// could not be reached or answered with a server error (Kyverno's
// network errors), a failure otherwise. Kyverno's message either way.
func (v *Verifier) failed(image string, err error) imageverify.Outcome {
	result := resultFail
	if Unreachable(err) {
		result = resultError
	}
	return imageverify.Outcome{Result: result, Message: fmt.Sprintf("failed to verify image %s: %s", image, err)}
}

// Unreachable says that err is the registry's (or the network's) fault,
// not the image's: no connection, a timeout, a server error, a rate limit.
func Unreachable(err error) bool {
	var ie *infraError
	if unconnected(err) || errors.As(err, &ie) || errors.Is(err, context.Canceled) {
		return true
	}
	var terr *transport.Error
	if errors.As(err, &terr) && (terr.StatusCode >= 500 || terr.StatusCode == http.StatusTooManyRequests) {
		return true
	}
	return false
}

// unconnected says that no answer came: no connection, no address, or
// the time ran out.
func unconnected(err error) bool {
	var netErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &netErr) || errors.As(err, &dnsErr) || errors.Is(err, context.DeadlineExceeded)
}

// noteDown remembers a registry that could not be reached.
func (v *Verifier) noteDown(registry string, err error) error {
	if unconnected(err) {
		v.mu.Lock()
		v.down[registry] = downEntry{err: err, until: v.opts.Now().Add(v.opts.DownTTL)}
		v.mu.Unlock()
	}
	return err
}

func (v *Verifier) isDown(registry string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	d, ok := v.down[registry]
	if !ok {
		return nil
	}
	if v.opts.Now().After(d.until) {
		delete(v.down, registry)
		return nil
	}
	return d.err
}

// limitedTransport counts the requests and holds each to its registry's rate.
type limitedTransport struct {
	next     http.RoundTripper
	rps      float64
	burst    int
	requests atomic.Int64

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

func (t *limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	l, ok := t.limiters[r.URL.Host]
	if !ok && t.rps < 0 {
		l, ok = rate.NewLimiter(rate.Inf, 0), true
		t.limiters[r.URL.Host] = l
	}
	if !ok {
		l = rate.NewLimiter(rate.Limit(t.rps), t.burst)
		t.limiters[r.URL.Host] = l
	}
	t.mu.Unlock()
	if err := l.Wait(r.Context()); err != nil {
		return nil, err
	}
	t.requests.Add(1)
	return t.next.RoundTrip(r)
}

// joinErrors joins errors as Kyverno's messages do ("a; b").
func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Error()
	}
	return &joined{msg: strings.Join(parts, "; "), errs: errs}
}

type joined struct {
	msg  string
	errs []error
}

func (j *joined) Error() string   { return j.msg }
func (j *joined) Unwrap() []error { return j.errs }
