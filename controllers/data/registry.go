package data

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/client-go/kubernetes"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/internal/tenant"
)

// RegistryOptions say whether policies may read image registries
// (imageRegistry context entries, CEL's image.GetMetadata) and with which
// credentials. Off by default: reading a registry per image of every Pod
// is network traffic and credentials a platform team turns on knowingly.
type RegistryOptions struct {
	Enabled bool
	// Client reads the pull secrets, in Namespace: PullSecrets (the
	// scanner's --image-pull-secrets) and those an entry names.
	Client      kubernetes.Interface
	Namespace   string
	PullSecrets []string
	// Transport connects to the registries (nil: go-containerregistry's
	// default); in a cluster it refuses the addresses policies must not
	// reach (internal/egress).
	Transport http.RoundTripper
}

// registry reads image metadata, each image digest once.
type registry struct {
	mu       sync.Mutex
	byDigest map[string]map[string]any // digest -> manifest, config, index
}

// ImageMetadata reads an image's metadata from its registry: the
// reference resolved to a digest (each answer reused for CallTTL, as tags
// move), then its manifest, config and index (read once per digest). The
// fields are those of Kyverno's imageRegistry entries (image, resolvedImage,
// registry, repository, identifier, manifest, configData, imageIndex) and of
// CEL's image.GetMetadata (tag, digest, config).
func (l *Loader) ImageMetadata(ctx context.Context, ref string, secrets []string, insecure bool) (map[string]any, error) {
	if !l.opts.Images.Enabled {
		return nil, fmt.Errorf("image %s: registry access is off: turn it on with tally-scanner --registry-access", ref)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	pull := append(slices.Clone(l.opts.Images.PullSecrets), secrets...)
	if ns := tenant.Of(ctx); ns != "" {
		// A namespaced policy borrows none of tally's credentials: the
		// Secrets of tally's namespace are not read for it (R47).
		if len(secrets) > 0 {
			return nil, fmt.Errorf("image %s: imageRegistryCredentials.secrets are not read for a namespaced policy (tally lends its credentials to no tenant)", ref)
		}
		pull = nil
	}
	key := "image " + r.Name() + " " + fmt.Sprint(pull)
	v, err := l.cached(ctx, key, "registry", func(ctx context.Context) (any, error) {
		var kc authn.Keychain = authn.DefaultKeychain
		if l.opts.Images.Client != nil && len(pull) > 0 {
			k, err := kauth.New(ctx, l.opts.Images.Client, kauth.Options{Namespace: l.opts.Images.Namespace,
				ImagePullSecrets: pull, ServiceAccountName: kauth.NoServiceAccount})
			if err != nil {
				return nil, fmt.Errorf("image %s: pull secrets: %w", ref, err)
			}
			kc = authn.NewMultiKeychain(k, authn.DefaultKeychain)
		}
		return l.reg.read(ctx, ref, r, kc, l.opts.Images.Transport)
	})
	m, _ := v.(map[string]any)
	return m, err
}

// read reads an image's metadata: its reference resolved, then its
// manifest, config and index (once per digest).
func (g *registry) read(ctx context.Context, ref string, r name.Reference, kc authn.Keychain, transport http.RoundTripper) (map[string]any, error) {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	if transport != nil {
		opts = append(opts, remote.WithTransport(transport))
	}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	digest := desc.Digest.String()
	parts, err := g.parts(digest, func() (map[string]any, error) { return readParts(desc) })
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	out := map[string]any{
		"image":         ref,
		"resolvedImage": r.Context().Name() + "@" + digest,
		"registry":      r.Context().RegistryStr(),
		"repository":    r.Context().RepositoryStr(),
		"identifier":    r.Identifier(),
		"digest":        digest,
	}
	if t, ok := r.(name.Tag); ok {
		out["tag"] = t.TagStr()
	}
	for k, v := range parts {
		out[k] = v
	}
	out["configData"] = parts["config"]
	return out, nil
}

// Registry reads image metadata straight from the registries, with the
// local docker credentials, as Kyverno's CLI does (getImageData of
// ImageValidatingPolicies; imageRegistry entries with --registry): each
// reference read once per run, each digest's parts once. The zero value is
// ready; Transport, when set, connects to the registries.
type Registry struct {
	Transport http.RoundTripper
	reg       registry
	mu        sync.Mutex
	answers   map[string]registryAnswer
}

type registryAnswer struct {
	md  map[string]any
	err error
}

var _ cel.ImageData = (*Registry)(nil)

// ImageMetadata implements cel.ImageData. Kubernetes Secrets (secrets) are
// not read by the CLI: the local docker credentials are used.
func (g *Registry) ImageMetadata(ctx context.Context, ref string, _ []string, insecure bool) (map[string]any, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	g.mu.Lock()
	a, ok := g.answers[r.Name()]
	g.mu.Unlock()
	if ok {
		return a.md, a.err
	}
	md, err := g.reg.read(ctx, ref, r, authn.DefaultKeychain, g.Transport)
	g.mu.Lock()
	if g.answers == nil {
		g.answers = map[string]registryAnswer{}
	}
	g.answers[r.Name()] = registryAnswer{md, err}
	g.mu.Unlock()
	return md, err
}

// parts returns the digest's manifest, config and index, read once.
func (g *registry) parts(digest string, read func() (map[string]any, error)) (map[string]any, error) {
	g.mu.Lock()
	p, ok := g.byDigest[digest]
	g.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := read()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.byDigest == nil {
		g.byDigest = map[string]map[string]any{}
	}
	g.byDigest[digest] = p
	g.mu.Unlock()
	return p, nil
}

// readParts reads an image (or index: then its linux/amd64 image, as a
// node of that platform would pull it) as JSON values.
func readParts(desc *remote.Descriptor) (map[string]any, error) {
	out := map[string]any{}
	var img v1.Image
	var err error
	if desc.MediaType.IsIndex() {
		var index any
		if err := json.Unmarshal(desc.Manifest, &index); err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		out["imageIndex"] = index
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range m.Manifests {
			if d.Platform == nil || d.Platform.OS == "linux" && d.Platform.Architecture == "amd64" {
				img, err = idx.Image(d.Digest)
				break
			}
		}
		if img == nil && err == nil {
			return out, nil // no image for the platform: the index alone
		}
	} else {
		img, err = desc.Image()
	}
	if err != nil {
		return nil, err
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	for k, raw := range map[string][]byte{"manifest": rawManifest, "config": rawConfig} {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// registryCredentials are an imageRegistry entry's imageRegistryCredentials.
type registryCredentials struct {
	AllowInsecureRegistry bool     `json:"allowInsecureRegistry"`
	Secrets               []string `json:"secrets"`
}

// imageRegistry evaluates an imageRegistry entry: the reference with
// variables substituted, its metadata, then jmesPath.
func (l *Loader) imageRegistry(ctx context.Context, entry *kyvernov1.ImageRegistry, data map[string]any) (any, error) {
	ref, err := variables.SubstituteString(entry.Reference, data)
	if err != nil {
		return nil, fmt.Errorf("imageRegistry.reference: %w", err)
	}
	var creds registryCredentials
	if entry.ImageRegistryCredentials != nil {
		if err := json.Unmarshal(entry.ImageRegistryCredentials.Raw, &creds); err != nil {
			return nil, fmt.Errorf("imageRegistry.imageRegistryCredentials: %w", err)
		}
	}
	md, err := l.ImageMetadata(ctx, ref, creds.Secrets, creds.AllowInsecureRegistry)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch image descriptor: %w", err)
	}
	if entry.JMESPath == "" {
		return md, nil
	}
	expr, err := variables.SubstituteString(entry.JMESPath, data)
	if err != nil {
		return nil, fmt.Errorf("imageRegistry.jmesPath: %w", err)
	}
	return variables.Query(expr, md)
}
