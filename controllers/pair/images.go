package pair

import (
	"context"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/imageverify/sigverify"
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
}

// newImageVerifier makes the verifier the scan and the webhook share (one
// cache), with the credentials of the Secrets entries name (and of
// --image-pull-secrets) read from the scanner's namespace, and its counts
// as metrics. Nil when verification is off.
func newImageVerifier(o ScannerOptions, kube kubernetes.Interface, reg prometheus.Registerer) engine.ImageVerifier {
	if !o.ImageVerify.Verify {
		return nil
	}
	pull := o.Images.PullSecrets
	verified := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_image_verifications_total",
		Help: "Image verifications run (not served from the verification cache) for verifyImages rules, by policy and result."},
		[]string{"policy", "result"})
	opts := sigverify.Options{
		TTL:      o.ImageVerify.CacheTTL,
		Verified: func(policy, result string) { verified.WithLabelValues(policy, result).Inc() },
		SecretKeychain: func(ctx context.Context, secrets []string) (authn.Keychain, error) {
			return kauth.New(ctx, kube, kauth.Options{Namespace: o.Namespace,
				ImagePullSecrets: append(slices.Clone(pull), secrets...), ServiceAccountName: kauth.NoServiceAccount})
		},
	}
	opts.SecretData = func(ctx context.Context, namespace, name string) (map[string][]byte, error) {
		s, err := kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return s.Data, nil
	}
	if o.ImageVerify.PodPullSecrets {
		opts.PodKeychain = func(ctx context.Context, namespace string, secrets []string) (authn.Keychain, error) {
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
