package data

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/variables"
	"github.com/tally-dev/tally/engine/wildcard"
)

// DefaultHTTPTimeout bounds one call to a service.
const DefaultHTTPTimeout = 10 * time.Second

// maxHTTPAnswer bounds the answer of a service read.
const maxHTTPAnswer = 4 << 20

// HTTPOptions say which services policies may call (apiCall.service
// entries, CEL's http.Get/Post). Nothing is allowed by default: a policy
// anyone may create would otherwise make the scanner call any address its
// network reaches.
type HTTPOptions struct {
	// Allow are URL patterns ("https://registry-api.tools.svc/*"; * and ?
	// are wildcards): a URL is called when one of them matches it.
	Allow []string
	// Timeout bounds one call (DefaultHTTPTimeout).
	Timeout time.Duration
}

// httpClients are the clients of the CA bundles services name, made once.
type httpClients struct {
	mu      sync.Mutex
	timeout time.Duration
	byCA    map[string]*http.Client
}

func (c *httpClients) client(caBundle string) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.byCA[caBundle]; ok {
		return cl, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caBundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caBundle)) {
			return nil, fmt.Errorf("caBundle holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	cl := &http.Client{Transport: tr, Timeout: c.timeout}
	if c.byCA == nil {
		c.byCA = map[string]*http.Client{}
	}
	c.byCA[caBundle] = cl
	return cl, nil
}

// allowed reports whether a URL may be called.
func (o HTTPOptions) allowed(url string) bool {
	for _, p := range o.Allow {
		if wildcard.Match(p, url) {
			return true
		}
	}
	return false
}

// HTTPCall makes a call to a service (CEL's http library, apiCall.service):
// allowed by HTTPOptions.Allow, bounded by its timeout, each distinct call
// reused for CallTTL. The answer is JSON, or a string when it is not.
func (l *Loader) HTTPCall(ctx context.Context, method, url string, body any, headers map[string]string, caBundle string) (any, error) {
	if !l.opts.HTTP.allowed(url) {
		return nil, fmt.Errorf("%s %s: calls to services are not allowed: allow the URL with tally-scanner --http-allow", method, url)
	}
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("%s %s: body: %w", method, url, err)
		}
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	key := method + " " + url + " " + string(payload) + " " + caBundle
	for _, k := range keys {
		key += " " + k + "=" + headers[k]
	}
	return l.cached(ctx, key, "http", func(ctx context.Context) (any, error) {
		cl, err := l.http.client(caBundle)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, url, err)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(payload))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, url, err)
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, url, err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPAnswer))
		if err != nil {
			return nil, fmt.Errorf("%s %s: reading the answer: %w", method, url, err)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(raw)))
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return string(raw), nil
		}
		return v, nil
	})
}

// service is an apiCall.service: the URL, CA bundle and headers.
type service struct {
	URL      string `json:"url"`
	CABundle string `json:"caBundle"`
	Headers  []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"headers"`
}

// serviceCall evaluates an apiCall entry that calls a service: its URL
// and headers with variables substituted, then jmesPath and default.
func (l *Loader) serviceCall(ctx context.Context, call *kyvernov1.ContextAPICall, data map[string]any) (any, error) {
	var svc service
	if err := json.Unmarshal(call.Service.Raw, &svc); err != nil {
		return nil, fmt.Errorf("apiCall.service: %w", err)
	}
	url, err := variables.SubstituteString(svc.URL, data)
	if err != nil {
		return nil, fmt.Errorf("apiCall.service.url: %w", err)
	}
	headers := map[string]string{}
	for _, h := range svc.Headers {
		v, err := variables.SubstituteString(h.Value, data)
		if err != nil {
			return nil, fmt.Errorf("apiCall.service.headers %s: %w", h.Key, err)
		}
		headers[h.Key] = v
	}
	withURL := *call
	withURL.URLPath = url
	return apiCall(&withURL, data, func(method, _ string, body []byte) (any, error) {
		var payload any
		if body != nil {
			if err := json.Unmarshal(body, &payload); err != nil {
				return nil, fmt.Errorf("apiCall.data: %w", err)
			}
		}
		v, err := l.HTTPCall(ctx, method, url, payload, headers, svc.CABundle)
		if err != nil {
			return nil, fmt.Errorf("failed to fetch data for APICall: %w", err)
		}
		return v, nil
	})
}
