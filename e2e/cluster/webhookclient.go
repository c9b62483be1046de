package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Webhook client authentication.
//
// The local control plane's kube-apiserver presents a client certificate
// to every admission webhook it calls, as a cluster admin sets it up for
// tally (docs/security.md): an AdmissionConfiguration names, for the
// ValidatingAdmissionWebhook and MutatingAdmissionWebhook plugins, a
// kubeconfig whose user "*" (any webhook) holds the certificate. A webhook
// run with the CA (tally-scanner --webhook-client-ca) then refuses any
// caller but the API server at the TLS handshake; one run without it is
// not affected.

// WebhookClientFiles writes, under dir, a CA, a client certificate it
// signed (CN kube-apiserver, client-auth usage), the webhook kubeconfig and
// the AdmissionConfiguration, and returns the paths of the CA and of the
// AdmissionConfiguration.
func WebhookClientFiles(dir string) (caFile, admissionConfig string, err error) {
	caFile, certFile, keyFile, err := clientCertificate(dir, "tally-webhook-client-ca", "kube-apiserver")
	if err != nil {
		return "", "", fmt.Errorf("webhook client certificate: %w", err)
	}
	kubeconfig, admissionConfig := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "admission.yaml")
	files := map[string][]byte{
		// "*" matches every webhook the API server calls.
		kubeconfig: fmt.Appendf(nil, `apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: %s
    client-key: %s
`, certFile, keyFile),
		admissionConfig: fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
`, kubeconfig),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return "", "", fmt.Errorf("webhook client authentication: %w", err)
		}
	}
	return caFile, admissionConfig, nil
}

// clientCertificate writes, under dir, a new CA (ca.crt) and a client
// certificate it signed for cn (client.crt, client.key, client-auth usage),
// and returns their paths.
func clientCertificate(dir, caName, cn string) (caFile, certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("CA key: %w", err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: caName}, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("client key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("client certificate: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return "", "", "", fmt.Errorf("client key: %w", err)
	}
	caFile = filepath.Join(dir, "ca.crt")
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	for path, data := range map[string][]byte{
		caFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}),
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  keyPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

// frontProxyName is the common name of the API server's front-proxy client
// certificate, the one name aggregated API servers accept request headers
// from.
const frontProxyName = "front-proxy-client"

// configureAggregation sets the API server up to proxy requests to
// aggregated API servers (reports-server), as kubeadm does: a front-proxy CA
// and client certificate, the request headers the aggregated servers trust,
// and routing to the endpoints of an APIService's Service (the local
// control plane runs no kube-proxy).
func configureAggregation(set func(flag, value string), dir string) error {
	caFile, certFile, keyFile, err := clientCertificate(dir, "tally-front-proxy-ca", frontProxyName)
	if err != nil {
		return fmt.Errorf("front-proxy client certificate: %w", err)
	}
	set("requestheader-client-ca-file", caFile)
	set("requestheader-allowed-names", frontProxyName)
	set("requestheader-username-headers", "X-Remote-User")
	set("requestheader-group-headers", "X-Remote-Group")
	set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	set("proxy-client-cert-file", certFile)
	set("proxy-client-key-file", keyFile)
	set("enable-aggregator-routing", "true")
	return nil
}
