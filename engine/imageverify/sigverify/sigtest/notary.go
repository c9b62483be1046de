package sigtest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/notaryproject/notation-core-go/signature/jws"
	"github.com/notaryproject/notation-go"
	notationregistry "github.com/notaryproject/notation-go/registry"
	"github.com/notaryproject/notation-go/signer"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	orasremote "oras.land/oras-go/v2/registry/remote"
)

// NotaryKey is a notary signing key and its self-signed code-signing
// certificate (Notary's requirements: digital signature, code signing, not
// a CA), which verifiers take as their trust store.
type NotaryKey struct {
	key  crypto.Signer
	cert *x509.Certificate
	// CertPEM is the certificate, as a Notary attestor's certificates.
	CertPEM string
}

// NewNotaryKey generates an ECDSA P-256 key and its certificate, valid
// from 2026 to 2046.
func NewNotaryKey(commonName string) (*NotaryKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"tally tests"}, Country: []string{"US"}, Province: []string{"WA"}, Locality: []string{"Seattle"}},
		NotBefore:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2046, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &NotaryKey{key: priv, cert: cert, CertPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}, nil
}

// LoadNotaryKey reads a key (PKCS #8 PEM) and its certificate (PEM): a
// key of the tests, whose certificate a test's policies name.
func LoadNotaryKey(keyPEM, certPEM []byte) (*NotaryKey, error) {
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(keyPEM, cryptoutils.SkipPassword)
	if err != nil {
		return nil, err
	}
	s, ok := priv.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("not a signing key: %T", priv)
	}
	certs, err := cryptoutils.UnmarshalCertificatesFromPEM(certPEM)
	if err != nil || len(certs) != 1 {
		return nil, fmt.Errorf("certificate: want one, got %d (%v)", len(certs), err)
	}
	return &NotaryKey{key: s, cert: certs[0], CertPEM: string(certPEM)}, nil
}

// KeyPEM is the private key (PKCS #8 PEM).
func (k *NotaryKey) KeyPEM() ([]byte, error) {
	return cryptoutils.MarshalPrivateKeyToPEM(k.key)
}

// Sign attaches the key's notary signature (JWS) of the image, as an OCI
// referrer, as `notation sign` does. The registry is read over plain HTTP.
func (k *NotaryKey) Sign(img name.Digest) error {
	s, err := signer.NewGenericSigner(k.key, []*x509.Certificate{k.cert})
	if err != nil {
		return err
	}
	repo, err := orasremote.NewRepository(img.Context().Name())
	if err != nil {
		return err
	}
	repo.PlainHTTP = true
	_, err = notation.Sign(context.Background(), s, notationregistry.NewRepository(repo), notation.SignOptions{
		SignerSignOptions: notation.SignerSignOptions{SignatureMediaType: jws.MediaTypeEnvelope},
		ArtifactReference: img.String(),
	})
	return err
}
