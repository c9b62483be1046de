package admission

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

var testCertOpts = certOptions{dnsNames: []string{"tally-webhook.ns.svc", "tally-webhook.ns.svc.cluster.local"},
	caValidity: 300 * 24 * time.Hour, certValidity: 90 * 24 * time.Hour}

func leafOf(t *testing.T, m material) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(m.cert, m.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// verifies checks that the bundle verifies the serving certificate for a name.
func verifies(t *testing.T, m material, name string, now time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.caCert)
	_, err := leafOf(t, m).Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now})
	return err
}

func TestGeneratedCertificates(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, changed, err := ensureMaterial(material{}, testCertOpts, now)
	if err != nil || !changed {
		t.Fatalf("first generation: changed=%v err=%v", changed, err)
	}
	for _, name := range append(testCertOpts.dnsNames, "127.0.0.1") {
		if err := verifies(t, m, name, now); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := verifies(t, m, "other.example", now); err == nil {
		t.Error("certificate verifies for a name it does not carry")
	}

	// Nothing to do while more than a third of the validity is left.
	if _, changed, _ := ensureMaterial(m, testCertOpts, now.Add(50*24*time.Hour)); changed {
		t.Error("renewed a certificate with 40 of 90 days left")
	}
	// The serving certificate is renewed with less than a third left; the CA stays.
	renewed, changed, err := ensureMaterial(m, testCertOpts, now.Add(65*24*time.Hour))
	if err != nil || !changed {
		t.Fatalf("renewal: changed=%v err=%v", changed, err)
	}
	if !bytes.Equal(renewed.caCert, m.caCert) || bytes.Equal(renewed.cert, m.cert) {
		t.Error("serving renewal must keep the CA and change the certificate")
	}
	if !leafOf(t, renewed).NotAfter.After(leafOf(t, m).NotAfter) {
		t.Error("renewed certificate does not last longer")
	}
	// New names: a new certificate.
	more := testCertOpts
	more.dnsNames = append([]string{"extra.example"}, more.dnsNames...)
	if named, changed, _ := ensureMaterial(m, more, now); !changed || verifies(t, named, "extra.example", now) != nil {
		t.Error("a new DNS name did not produce a certificate carrying it")
	}
	// The CA is renewed with less than a third left; the old CA stays in the
	// bundle while valid, so certificates of either verify.
	at := now.Add(250 * 24 * time.Hour)
	rotated, changed, err := ensureMaterial(m, testCertOpts, at)
	if err != nil || !changed {
		t.Fatalf("CA rotation: changed=%v err=%v", changed, err)
	}
	if got := len(parseCerts(rotated.caCert)); got != 2 {
		t.Errorf("bundle holds %d CAs, want the new and the old", got)
	}
	if err := verifies(t, rotated, "tally-webhook.ns.svc", at); err != nil {
		t.Error(err)
	}
	old := m
	old.caCert = rotated.caCert
	if err := verifies(t, old, "tally-webhook.ns.svc", now.Add(60*24*time.Hour)); err != nil {
		t.Errorf("the old CA left the bundle too early: %v", err)
	}
	// Garbage in the Secret: everything is regenerated.
	if _, changed, err := ensureMaterial(material{cert: []byte("x"), caCert: []byte("y")}, testCertOpts, now); err != nil || !changed {
		t.Errorf("garbage: changed=%v err=%v", changed, err)
	}
}

func TestSecretCertsAndCABundle(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tally"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "a.tally.dev"}, {Name: "b.tally.dev"}},
	}
	kube := kubefake.NewSimpleClientset(vwc)
	replica := func() *Bridge {
		b := New(nil, kube, nil, Options{SecretNamespace: "ns", SecretName: "tally-webhook-tls", WebhookConfiguration: "tally",
			CAValidity: testCertOpts.caValidity, CertValidity: testCertOpts.certValidity, Clock: clk})
		return b
	}
	a, b := replica(), replica()
	if err := a.certs.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.certs.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.certs.bundle(), b.certs.bundle()) {
		t.Fatal("two replicas serve different CAs")
	}
	ca, _ := a.certs.GetCertificate(nil)
	cb, _ := b.certs.GetCertificate(nil)
	if !bytes.Equal(ca.Certificate[0], cb.Certificate[0]) {
		t.Error("two replicas serve different certificates")
	}
	if err := a.ensureCABundle(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tally", metav1.GetOptions{})
	for _, w := range got.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, a.certs.bundle()) {
			t.Errorf("webhook %s has no CA bundle", w.Name)
		}
	}
	// Rotation by one replica reaches the other through the Secret.
	clk.Step(70 * 24 * time.Hour)
	if err := a.certs.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.certs.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ca2, _ := a.certs.GetCertificate(nil)
	cb2, _ := b.certs.GetCertificate(nil)
	if bytes.Equal(ca2.Certificate[0], ca.Certificate[0]) || !bytes.Equal(ca2.Certificate[0], cb2.Certificate[0]) {
		t.Error("rotation did not reach both replicas")
	}
	// A missing webhook configuration is skipped quietly.
	missing := New(nil, kube, nil, Options{SecretNamespace: "ns", SecretName: "tally-webhook-tls", WebhookConfiguration: "absent", Clock: clk})
	if err := missing.certs.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := missing.ensureCABundle(ctx); err != nil {
		t.Errorf("absent configuration: %v", err)
	}
}

func TestDirCertsReload(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(m material) {
		for name, data := range map[string][]byte{keyCert: m.cert, keyKey: m.key, keyCACert: m.caCert} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	m1, _, _ := ensureMaterial(material{}, testCertOpts, now)
	write(m1)
	d := &dirCerts{dir: dir}
	if err := d.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	c1, _ := d.GetCertificate(nil)
	m2, _, _ := ensureMaterial(material{}, testCertOpts, now)
	write(m2)
	if err := d.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	c2, _ := d.GetCertificate(nil)
	if bytes.Equal(c1.Certificate[0], c2.Certificate[0]) || !bytes.Equal(d.bundle(), m2.caCert) {
		t.Error("changed files were not reloaded")
	}
	if err := os.WriteFile(filepath.Join(dir, keyKey), []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.reconcile(context.Background()); err == nil {
		t.Error("a broken key was accepted")
	}
	if c3, _ := d.GetCertificate(nil); !bytes.Equal(c3.Certificate[0], c2.Certificate[0]) {
		t.Error("a broken update replaced the served certificate")
	}
}

// With a client CA the webhook requires a client certificate it signed: a
// caller without one (a Pod reaching the Service) cannot even connect.
func TestWebhookRequiresClientCertificatesWithAClientCA(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	server, _, _ := ensureMaterial(material{}, testCertOpts, now)
	for name, data := range map[string][]byte{keyCert: server.cert, keyKey: server.key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The API server's client CA and certificate.
	caPEM, caKeyPEM, err := newCA(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPair, err := tls.X509KeyPair(caPEM, caKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caPair.Certificate[0])
	key, keyPEM, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	b := New(nil, nil, nil, Options{CertDir: dir, ClientCAFile: caFile})
	if err := b.certs.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg, err := b.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(server.caCert)
	get := func(certs ...tls.Certificate) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, ServerName: "tally-webhook.ns.svc"}}}
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err == nil {
		t.Error("a caller without a client certificate was served")
	}
	if err := get(client); err != nil {
		t.Errorf("the API server's client certificate was refused: %v", err)
	}
	if _, err := New(nil, nil, nil, Options{CertDir: dir, ClientCAFile: filepath.Join(dir, "missing")}).tlsConfig(); err == nil {
		t.Error("a missing client CA file was accepted")
	}
}
