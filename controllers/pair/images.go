package pair

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sigstore/sigstore-go/pkg/root"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/imageverify/sigverify"
	"github.com/tally-dev/tally/internal/egress"
	"github.com/tally-dev/tally/internal/tenant"
)

// ImageOptions configure the verification of verifyImages rules (R41, R43).
type ImageOptions struct {
	// Verify turns it on (--verify-images); off, verifyImages rules are
	// skipped, and say so.
	Verify bool
	// CacheTTL is how long a verified image is not verified again
	// (--image-verify-cache-ttl).
	CacheTTL time.Duration
	// PodPullSecrets reads the credentials of a resource's
	// imagePullSecrets from its namespace (--pod-image-pull-secrets; the
	// scanner then needs get on Secrets in every namespace).
	PodPullSecrets bool
	// DenyCIDRs and AllowCIDRs: the registry addresses refused besides
	// loopback, link-local and the cluster's Service and Pod ranges
	// (--registry-deny-cidrs), and those allowed all the same
	// (--registry-allow-cidrs).
	DenyCIDRs, AllowCIDRs []netip.Prefix
	// AllowPorts are single address:port pairs allowed (--registry-allow-cidrs).
	AllowPorts []netip.AddrPort
	// TrustedRoot is --sigstore-trusted-root: a trusted_root.json keyless
	// signatures are verified against ("": the public Sigstore root).
	TrustedRoot string
}

// clusterRangesEvery is how often the cluster's Service and Pod ranges
// are read again.
const clusterRangesEvery = 10 * time.Minute

// registryGuard is the guard of the scanner's registry connections: it
// refuses loopback, link-local, the cluster's Service ranges
// (ServiceCIDRs) and Pod ranges (the Nodes' podCIDRs), and --registry-
// deny-cidrs, but --registry-allow-cidrs (issue 53).
type registryGuard struct {
	*egress.Guard
	kube kubernetes.Interface
	deny []netip.Prefix
}

func newRegistryGuard(o ImageOptions, kube kubernetes.Interface) *registryGuard {
	g := &registryGuard{Guard: egress.New(o.DenyCIDRs, o.AllowCIDRs), kube: kube, deny: o.DenyCIDRs}
	g.AllowPorts(o.AllowPorts)
	return g
}

// run reads the cluster's ranges now and every clusterRangesEvery, until
// ctx ends.
func (g *registryGuard) run(ctx context.Context, clk clock.WithTicker) error {
	t := clk.NewTicker(clusterRangesEvery)
	defer t.Stop()
	for {
		g.SetDeny(append(slices.Clone(g.deny), clusterRanges(ctx, g.kube)...))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// clusterRanges are the cluster's Service ranges (networking.k8s.io/v1
// ServiceCIDRs) and Pod ranges (the Nodes' spec.podCIDRs). What cannot be
// read (not served, not allowed) is left out, with a log line.
func clusterRanges(ctx context.Context, kube kubernetes.Interface) []netip.Prefix {
	log := logr.FromContextOrDiscard(ctx)
	var cidrs []string
	if list, err := kube.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{}); err != nil {
		log.Info("the cluster's Service ranges cannot be read; registries there are not refused unless --registry-deny-cidrs names them", "err", err.Error())
	} else {
		for _, s := range list.Items {
			cidrs = append(cidrs, s.Spec.CIDRs...)
		}
	}
	if list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		log.Info("the cluster's Pod ranges cannot be read; registries there are not refused unless --registry-deny-cidrs names them", "err", err.Error())
	} else {
		for _, n := range list.Items {
			cidrs = append(cidrs, n.Spec.PodCIDRs...)
			if n.Spec.PodCIDR != "" {
				cidrs = append(cidrs, n.Spec.PodCIDR)
			}
		}
	}
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// newImageVerifier makes the verifier the scan and the webhook share (one
// cache), with the credentials of the Secrets entries name (and of
// --image-pull-secrets) read from the scanner's namespace, and its counts
// as metrics. Nil when verification is off.
func newImageVerifier(o ScannerOptions, kube kubernetes.Interface, tenants data.Tenants, transport http.RoundTripper, reg prometheus.Registerer) engine.ImageVerifier {
	if !o.ImageVerify.Verify {
		return nil
	}
	// A namespaced policy's check reads Secrets (a keys.secret of its
	// namespace, the resource's imagePullSecrets) with its namespace's
	// identity (R47).
	kubeFor := func(ctx context.Context) (kubernetes.Interface, error) {
		ns := tenant.Of(ctx)
		if ns == "" {
			return kube, nil
		}
		if tenants == nil {
			return nil, data.ErrNoTenantIdentity
		}
		c, err := tenants.For(ns)
		if err != nil {
			return nil, err
		}
		return c.Kube, nil
	}
	pull := o.Images.PullSecrets
	verified := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_image_verifications_total",
		Help: "Image verifications run (not served from the verification cache) for verifyImages rules, by policy and result."},
		[]string{"policy", "result"})
	opts := sigverify.Options{
		Transport: transport,
		TrustedRoot: func() func() (root.TrustedMaterial, error) {
			if o.ImageVerify.TrustedRoot == "" {
				return nil
			}
			return sigverify.TrustedRootFile(o.ImageVerify.TrustedRoot)
		}(),
		TTL:      o.ImageVerify.CacheTTL,
		Verified: func(policy, result string) { verified.WithLabelValues(policy, result).Inc() },
		SecretKeychain: func(ctx context.Context, secrets []string) (authn.Keychain, error) {
			return kauth.New(ctx, kube, kauth.Options{Namespace: o.Namespace,
				ImagePullSecrets: append(slices.Clone(pull), secrets...), ServiceAccountName: kauth.NoServiceAccount})
		},
	}
	opts.SecretData = func(ctx context.Context, namespace, name string) (map[string][]byte, error) {
		kube, err := kubeFor(ctx)
		if err != nil {
			return nil, err
		}
		s, err := kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return s.Data, nil
	}
	if o.ImageVerify.PodPullSecrets {
		opts.PodKeychain = func(ctx context.Context, namespace string, secrets []string) (authn.Keychain, error) {
			kube, err := kubeFor(ctx)
			if err != nil {
				return nil, err
			}
			return kauth.New(ctx, kube, kauth.Options{Namespace: namespace, ImagePullSecrets: secrets, ServiceAccountName: kauth.NoServiceAccount})
		}
	}
	v := sigverify.New(opts)
	reg.MustRegister(
		verified,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tally_image_registry_requests_total",
			Help: "HTTP requests sent to image registries to verify images."},
			func() float64 { return float64(v.Requests()) }),
	)
	return v
}
