package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// Keys of the serving-certificate Secret (a kubernetes.io/tls Secret with
// the CA beside the pair).
const (
	keyCert   = corev1.TLSCertKey       // tls.crt
	keyKey    = corev1.TLSPrivateKeyKey // tls.key
	keyCACert = "ca.crt"                // the CA bundle: current CA first, then a previous one still valid
	keyCAKey  = "ca.key"
)

// certState is the serving certificate and the CA bundle that verifies it.
type certState struct {
	cert   *tls.Certificate
	bundle []byte
}

// certHolder serves the current certificate to the TLS stack.
type certHolder struct{ cur atomic.Pointer[certState] }

func (h *certHolder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s := h.cur.Load()
	if s == nil {
		return nil, errors.New("no serving certificate yet")
	}
	return s.cert, nil
}

func (h *certHolder) ready() bool { return h.cur.Load() != nil }

func (h *certHolder) bundle() []byte {
	if s := h.cur.Load(); s != nil {
		return s.bundle
	}
	return nil
}

// material is the PEM content of the Secret.
type material struct {
	cert, key, caCert, caKey []byte
}

func (m material) data() map[string][]byte {
	return map[string][]byte{keyCert: m.cert, keyKey: m.key, keyCACert: m.caCert, keyCAKey: m.caKey}
}

func materialOf(data map[string][]byte) material {
	return material{cert: data[keyCert], key: data[keyKey], caCert: data[keyCACert], caKey: data[keyCAKey]}
}

// certOptions say what the generated certificates look like.
type certOptions struct {
	dnsNames     []string
	caValidity   time.Duration
	certValidity time.Duration
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}

func newCA(now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "tally-webhook-ca", Organization: []string{"tally"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func newServing(now time.Time, o certOptions, ca *x509.Certificate, caKey any) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	cn := "tally-webhook"
	if len(o.dnsNames) > 0 {
		cn = o.dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: cn, Organization: []string{"tally"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(o.certValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: o.dnsNames, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && b.Type == "CERTIFICATE" {
			out = append(out, c)
		}
	}
}

// due reports whether a certificate has less than a third of its validity left.
func due(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Sub(now) < life/3
}

// ensureMaterial returns the material to use: m itself when it is complete,
// valid for the wanted names and not due for renewal (changed=false), or a
// renewed one. A CA due for renewal is replaced and the old one kept in the
// bundle while it is valid, so that callers that still trust only the old
// CA keep working during the rotation.
func ensureMaterial(m material, o certOptions, now time.Time) (material, bool, error) {
	cas := parseCerts(m.caCert)
	var ca *x509.Certificate
	var caKey any
	if len(cas) > 0 {
		if k, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cas[0].Raw}), m.caKey); err == nil {
			ca, caKey = cas[0], k.PrivateKey
		}
	}
	out := m
	changed := false
	if ca == nil || due(ca, now) {
		caPEM, caKeyPEM, err := newCA(now, o.caValidity)
		if err != nil {
			return m, false, fmt.Errorf("generate CA: %w", err)
		}
		bundle := caPEM
		if ca != nil && now.Before(ca.NotAfter) {
			bundle = append(append([]byte{}, caPEM...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
		}
		out.caCert, out.caKey = bundle, caKeyPEM
		k, err := tls.X509KeyPair(caPEM, caKeyPEM)
		if err != nil {
			return m, false, err
		}
		ca, caKey = parseCerts(caPEM)[0], k.PrivateKey
		changed = true
	} else if pruned := pruneExpired(cas, now); len(pruned) != len(cas) {
		out.caCert, changed = pruned2PEM(pruned), true
	}
	if changed || !servingOK(out, ca, o, now) {
		c, k, err := newServing(now, o, ca, caKey)
		if err != nil {
			return m, false, fmt.Errorf("generate serving certificate: %w", err)
		}
		out.cert, out.key, changed = c, k, true
	}
	return out, changed, nil
}

func pruneExpired(cas []*x509.Certificate, now time.Time) []*x509.Certificate {
	out := cas[:0:0]
	for i, c := range cas {
		if i == 0 || now.Before(c.NotAfter) {
			out = append(out, c)
		}
	}
	return out
}

func pruned2PEM(cas []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range cas {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}) // a bytes.Buffer's Write never fails
	}
	return buf.Bytes()
}

// servingOK reports whether the serving pair is usable: it parses, matches
// its key, is signed by ca, carries the wanted names and is not due.
func servingOK(m material, ca *x509.Certificate, o certOptions, now time.Time) bool {
	pair, err := tls.X509KeyPair(m.cert, m.key)
	if err != nil {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || due(leaf, now) || leaf.CheckSignatureFrom(ca) != nil {
		return false
	}
	want := slices.Clone(o.dnsNames)
	got := slices.Clone(leaf.DNSNames)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return false
	}
	return slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("127.0.0.1")) })
}

func stateOf(m material) (*certState, error) {
	pair, err := tls.X509KeyPair(m.cert, m.key)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &certState{cert: &pair, bundle: m.caCert}, nil
}

// secretCerts generates the serving certificate and keeps it in a Secret
// shared by every replica; whoever finds it missing or due renews it, and a
// conflicting write means another replica did: its result is read back.
type secretCerts struct {
	certHolder
	kube       kubernetes.Interface
	namespace  string
	secretName string
	opts       certOptions
	clock      clock.Clock
}

// reconcile makes the Secret hold usable material and serves it.
func (s *secretCerts) reconcile(ctx context.Context) error {
	return retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		secrets := s.kube.CoreV1().Secrets(s.namespace)
		sec, err := secrets.Get(ctx, s.secretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			m, _, err := ensureMaterial(material{}, s.opts, s.clock.Now())
			if err != nil {
				return err
			}
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: s.secretName, Namespace: s.namespace,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "tally"}},
				Type: corev1.SecretTypeTLS, Data: m.data(),
			}
			if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
				return err
			}
			logr.FromContextOrDiscard(ctx).Info("generated the webhook serving certificate", "secret", s.namespace+"/"+s.secretName)
			return s.serve(m)
		}
		if err != nil {
			return fmt.Errorf("get secret %s/%s: %w", s.namespace, s.secretName, err)
		}
		m, changed, err := ensureMaterial(materialOf(sec.Data), s.opts, s.clock.Now())
		if err != nil {
			return err
		}
		if changed {
			sec = sec.DeepCopy()
			sec.Data = m.data()
			if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
				return err
			}
			logr.FromContextOrDiscard(ctx).Info("renewed the webhook serving certificate", "secret", s.namespace+"/"+s.secretName)
		}
		return s.serve(m)
	})
}

// serveEphemeral serves freshly generated material that is not persisted.
func (s *secretCerts) serveEphemeral() error {
	m, _, err := ensureMaterial(material{}, s.opts, s.clock.Now())
	if err != nil {
		return err
	}
	return s.serve(m)
}

func (s *secretCerts) serve(m material) error {
	st, err := stateOf(m)
	if err != nil {
		return err
	}
	if cur := s.cur.Load(); cur == nil || !bytes.Equal(cur.cert.Certificate[0], st.cert.Certificate[0]) || !bytes.Equal(cur.bundle, st.bundle) {
		s.cur.Store(st)
	}
	return nil
}

// dirCerts serves a certificate supplied as files (tls.crt, tls.key and
// optionally ca.crt, the bundle set on the webhook configuration) and
// reloads them when they change.
type dirCerts struct {
	certHolder
	dir  string
	last []byte
}

func (d *dirCerts) reconcile(context.Context) error {
	cert, err := os.ReadFile(filepath.Join(d.dir, keyCert))
	if err != nil {
		return fmt.Errorf("read serving certificate: %w", err)
	}
	key, err := os.ReadFile(filepath.Join(d.dir, keyKey))
	if err != nil {
		return fmt.Errorf("read serving key: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(d.dir, keyCACert))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read CA bundle: %w", err)
	}
	all := bytes.Join([][]byte{cert, key, ca}, []byte{0})
	if bytes.Equal(all, d.last) {
		return nil
	}
	st, err := stateOf(material{cert: cert, key: key, caCert: ca})
	if err != nil {
		return fmt.Errorf("%s: %w", d.dir, err)
	}
	d.cur.Store(st)
	d.last = all
	return nil
}
