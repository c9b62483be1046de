package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmespath-community/go-jmespath/pkg/parsing"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/controllers/admission"
	"github.com/tally-dev/tally/engine"
)

// Kyverno checks policies in a webhook of its own. The stand-in answers the
// policy writes Kyverno refuses in ways tally's webhook does not, so that
// the beside-Kyverno configuration meets what Kyverno 1.19 answers (issue
// 25) and the cases never lean on tally's wording:
//   - a ClusterPolicy or Policy with admission and background both off, and
//     one whose variables hold a JMESPath that does not parse, are refused
//     with Kyverno's wording (tally's webhook refuses them with its own);
//   - a ValidatingPolicy or NamespacedValidatingPolicy whose expressions do
//     not compile is refused (tally's webhook stores it, and its status
//     says it is not Ready).
// Every other review, and everything the checks do not decide, goes to the
// bridge.

// Kyverno 1.19's refusals, as it words them.
const (
	refusalNeverEvaluated   = "disabling both admission and background processing is not allowed"
	refusalInvalidVariables = "policy contains invalid variables: "
)

// policyWebhook serves /validate: Kyverno's policy checks, then the bridge.
type policyWebhook struct {
	next http.Handler
}

func (h policyWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, admission.DefaultMaxRequestBytes))
	if err != nil {
		http.Error(w, "read admission review: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err == nil && review.Request != nil {
		if reason := kyvernoRefusal(review.Request); reason != "" {
			out, err := json.Marshal(&admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
				Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false, Result: &metav1.Status{
					Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: reason,
				}},
			})
			if err != nil {
				http.Error(w, "encode admission response: "+err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out) // the API server went away: nothing to tell it
			return
		}
	}
	// Not decided here (a malformed review included: the bridge says why).
	r.Body = io.NopCloser(bytes.NewReader(body))
	h.next.ServeHTTP(w, r)
}

// kyvernoRefusal is Kyverno's refusal of a policy write ("" when the
// stand-in's checks do not refuse it).
func kyvernoRefusal(req *admissionv1.AdmissionRequest) string {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update || req.SubResource != "" {
		return ""
	}
	var obj map[string]any
	if json.Unmarshal(req.Object.Raw, &obj) != nil {
		return ""
	}
	switch {
	case req.Kind.Group == "kyverno.io" && (req.Kind.Kind == "ClusterPolicy" || req.Kind.Kind == "Policy"):
		if !enabled(obj, "admission") && !enabled(obj, "background") {
			return refusalNeverEvaluated
		}
		err := compileClassic(obj, req.Kind.Kind == "Policy")
		var syntax parsing.SyntaxError
		if errors.As(err, &syntax) {
			return refusalInvalidVariables + err.Error()
		}
	case req.Kind.Group == policiesv1.Group && (req.Kind.Kind == policiesv1.KindValidatingPolicy || req.Kind.Kind == policiesv1.KindNamespacedValidatingPolicy):
		vp, err := policiesv1.FromObject(obj)
		if err != nil {
			return "" // not the stand-in's to decide: the bridge answers
		}
		if _, err := engine.CompileValidatingPolicy(vp); err != nil {
			return err.Error()
		}
	}
	return ""
}

// enabled reads spec.<field> of a policy, true unless set false.
func enabled(obj map[string]any, field string) bool {
	v, found, err := unstructured.NestedBool(obj, "spec", field)
	return !found || err != nil || v
}

// compileClassic compiles a ClusterPolicy or Policy as tally's engine does.
func compileClassic(obj map[string]any, namespaced bool) error {
	var compiled *engine.Policy
	var err error
	if namespaced {
		var p kyvernov1.Policy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
			return err
		}
		compiled, err = engine.CompilePolicy(&p)
	} else {
		var p kyvernov1.ClusterPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
			return err
		}
		compiled, err = engine.CompileClusterPolicy(&p)
	}
	if err != nil {
		return err
	}
	return engine.Malformed(compiled)
}

// secretCert serves the certificate the bridge keeps in its Secret (it
// generates and rotates it, and sets its CA on the webhook configuration),
// read again at most every certReread.
type secretCert struct {
	kube            kubernetes.Interface
	namespace, name string

	mu   sync.Mutex
	cert *tls.Certificate
	read time.Time
}

const certReread = 10 * time.Second

func (c *secretCert) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && time.Since(c.read) < certReread {
		return c.cert, nil
	}
	sec, err := c.kube.CoreV1().Secrets(c.namespace).Get(hello.Context(), c.name, metav1.GetOptions{})
	if err == nil {
		var cert tls.Certificate
		if cert, err = tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"]); err == nil {
			c.cert, c.read = &cert, time.Now()
			return c.cert, nil
		}
	}
	if c.cert != nil {
		return c.cert, nil // the previous one, until the Secret can be read again
	}
	return nil, fmt.Errorf("serving certificate from Secret %s/%s: %w", c.namespace, c.name, err)
}

// webhookServer serves the webhook over TLS at addr once ready says the
// bridge can answer (its policies are synced, its certificate is in the
// Secret); up says it is serving.
type webhookServer struct {
	addr    string
	handler http.Handler
	ready   func() bool
	certs   *secretCert
	up      atomic.Bool
}

func (w *webhookServer) run(ctx context.Context) error {
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return w.ready(), nil
	}); err != nil {
		return nil // ctx ended
	}
	ln, err := net.Listen("tcp", w.addr)
	if err != nil {
		return fmt.Errorf("webhook: listen on %s: %w", w.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/validate", w.handler)
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.certs.GetCertificate},
		ReadHeaderTimeout: 5 * time.Second,
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		_ = srv.Close() // the process is stopping
	}()
	w.up.Store(true)
	err = srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return fmt.Errorf("webhook: %w", err)
}
