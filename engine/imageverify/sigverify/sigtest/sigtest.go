// Package sigtest is a registry of the tests' own, with images signed and
// attested as cosign signs them (generated keys, no transparency log): no
// network needed. Used by the unit tests, the CLI tests, the conformance
// suite and the bench.
package sigtest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ggcrmutate "github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Registry is an OCI registry served over plain HTTP on a loopback port.
type Registry struct {
	// Host is "127.0.0.1:port".
	Host     string
	server   *http.Server
	listener net.Listener
	// auth is "user:password" once RequireAuth was called.
	auth atomic.Pointer[string]
}

// Start serves a registry on addr ("127.0.0.1:0" for any free port).
func Start(addr string) (*Registry, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: l.Addr().String(), listener: l}
	next := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true))
	r.server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if want := r.auth.Load(); want != nil {
				user, pass, ok := req.BasicAuth()
				if !ok || user+":"+pass != *want {
					w.Header().Set("WWW-Authenticate", `Basic realm="sigtest"`)
					http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
					return
				}
			}
			next.ServeHTTP(w, req)
		}),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// RequireAuth makes the registry answer only requests with these basic
// credentials (push the fixtures first).
func (r *Registry) RequireAuth(user, password string) {
	s := user + ":" + password
	r.auth.Store(&s)
}

// Stop stops serving: the registry's address refuses connections.
func (r *Registry) Stop() { _ = r.server.Close() }

// Push writes a random image as repo:tag and returns its digest reference.
func (r *Registry) Push(repo, tag string) (name.Digest, error) {
	img, err := random.Image(256, 1)
	if err != nil {
		return name.Digest{}, err
	}
	return r.PushImage(repo, tag, img)
}

// FixtureImage is an image of its own for each seed, the same on every
// call (no layer; the seed is a label of its config): its digest is known
// before it is pushed (a test can name it).
func FixtureImage(seed string) (v1.Image, error) {
	return ggcrmutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64", OS: "linux",
		Config: v1.Config{Labels: map[string]string{"dev.tally.fixture": seed}},
		RootFS: v1.RootFS{Type: "layers"},
	})
}

// PushImage writes img as repo:tag and returns its digest reference.
func (r *Registry) PushImage(repo, tag string, img v1.Image) (name.Digest, error) {
	ref, err := name.NewTag(r.Host + "/" + repo + ":" + tag)
	if err != nil {
		return name.Digest{}, err
	}
	if err := remote.Write(ref, img); err != nil {
		return name.Digest{}, fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return ref.Context().Digest(d.String()), nil
}

// Key is a generated ECDSA P-256 key pair, with a certificate when a CA
// issued it (then its signatures carry the certificate and its chain).
type Key struct {
	signer signature.SignerVerifier
	// PublicPEM is the public key, as a verifyImages rule's publicKeys.
	PublicPEM string
	// CertPEM and ChainPEM are the key's certificate and its CA's, when
	// Issue made it.
	CertPEM, ChainPEM []byte
}

// NewKey generates a key pair.
func NewKey() (*Key, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return keyOf(priv)
}

// LoadKey reads an ECDSA private key (PKCS #8 PEM): a key of the tests,
// whose public half a test's policies name.
func LoadKey(privatePEM []byte) (*Key, error) {
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(privatePEM, cryptoutils.SkipPassword)
	if err != nil {
		return nil, err
	}
	ec, ok := priv.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("not an ECDSA key: %T", priv)
	}
	return keyOf(ec)
}

func keyOf(priv *ecdsa.PrivateKey) (*Key, error) {
	sv, err := signature.LoadECDSASignerVerifier(priv, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		return nil, err
	}
	return &Key{signer: sv, PublicPEM: string(pub)}, nil
}

// Sign attaches the key's cosign signature of the image (with the given
// annotations in its payload), as `cosign sign --tlog-upload=false` does.
func (k *Key) Sign(img name.Digest, annotations map[string]any) error {
	body, err := payload.Cosign{Image: img, Annotations: annotations}.MarshalJSON()
	if err != nil {
		return err
	}
	sig, err := k.signer.SignMessage(bytes.NewReader(body))
	if err != nil {
		return err
	}
	var opts []static.Option
	if k.CertPEM != nil {
		opts = append(opts, static.WithCertChain(k.CertPEM, k.ChainPEM))
	}
	ociSig, err := static.NewSignature(body, base64.StdEncoding.EncodeToString(sig), opts...)
	if err != nil {
		return err
	}
	se, err := ociremote.SignedEntity(img)
	if err != nil {
		return err
	}
	se, err = mutate.AttachSignatureToEntity(se, ociSig)
	if err != nil {
		return err
	}
	return ociremote.WriteSignatures(img.Repository, se)
}

// Attest attaches the key's in-toto attestation of the image with the
// predicate, as `cosign attest --tlog-upload=false` does.
func (k *Key) Attest(img name.Digest, predicateType string, predicate map[string]any) error {
	statement := map[string]any{
		"_type":         "https://in-toto.io/Statement/v0.1",
		"predicateType": predicateType,
		"subject": []any{map[string]any{
			"name":   img.Repository.Name(),
			"digest": map[string]any{"sha256": img.DigestStr()[len("sha256:"):]},
		}},
		"predicate": predicate,
	}
	body, err := json.Marshal(statement)
	if err != nil {
		return err
	}
	envelope, err := dsse.WrapSigner(k.signer, "application/vnd.in-toto+json").SignMessage(bytes.NewReader(body))
	if err != nil {
		return err
	}
	var opts []static.Option
	if k.CertPEM != nil {
		opts = append(opts, static.WithCertChain(k.CertPEM, k.ChainPEM))
	}
	att, err := static.NewAttestation(envelope, opts...)
	if err != nil {
		return err
	}
	se, err := ociremote.SignedEntity(img)
	if err != nil {
		return err
	}
	se, err = mutate.AttachAttestationToEntity(se, att)
	if err != nil {
		return err
	}
	return ociremote.WriteAttestations(img.Repository, se)
}

// CA is a certificate authority of the tests (a Fulcio of their own).
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA's certificate: a keyless attestor's roots, a
	// certificates attestor's certChain.
	CertPEM []byte
}

// NewCA makes a self-signed CA, valid for a day.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tally tests CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// oidIssuer is Fulcio's extension naming the OIDC issuer (its first form,
// the raw string).
var oidIssuer = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}

// Issue makes a key with a code-signing certificate of the CA for the
// identity (an email SAN) and OIDC issuer, as Fulcio issues one.
func (ca *CA) Issue(email, issuer string) (*Key, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		EmailAddresses:  []string{email},
		ExtraExtensions: []pkix.Extension{{Id: oidIssuer, Value: []byte(issuer)}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, priv.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	k, err := keyOf(priv)
	if err != nil {
		return nil, err
	}
	k.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	k.ChainPEM = ca.CertPEM
	return k, nil
}

// Policy is a ClusterPolicy (YAML) named name, Audit, with one verifyImages
// rule "signed" on Pods: the images imageReference selects must be signed
// with the key, no transparency log.
func (k *Key) Policy(name, imageReference string) string {
	pem := "              " + strings.ReplaceAll(strings.TrimSpace(k.PublicPEM), "\n", "\n              ")
	return `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: ` + name + `}
spec:
  validationFailureAction: Audit
  background: true
  rules:
  - name: signed
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["` + imageReference + `"]
      attestors:
      - entries:
        - keys:
            publicKeys: |-
` + pem + `
            rekor: {ignoreTlog: true}
            ctlog: {ignoreSCT: true}
`
}

// ImageValidatingPolicy is an ImageValidatingPolicy (YAML) named name, on
// Pods, Audit: the images glob selects must name a digest and be signed
// with the key (no transparency log).
func (k *Key) ImageValidatingPolicy(name, glob string) string {
	pem := "          " + strings.ReplaceAll(strings.TrimSpace(k.PublicPEM), "\n", "\n          ")
	return `apiVersion: policies.kyverno.io/v1
kind: ImageValidatingPolicy
metadata: {name: ` + name + `}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchImageReferences:
  - glob: "` + glob + `"
  attestors:
  - name: key
    cosign:
      key:
        data: |-
` + pem + `
      ctlog: {insecureIgnoreTlog: true, insecureIgnoreSCT: true}
  validations:
  - expression: "images.containers.map(image, verifyImageSignatures(image, [attestors.key])).all(n, n > 0)"
    message: failed the image signature verification
`
}
