package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// Issue 53: whatever names the address (an IP, a name resolving to it, an
// IPv4-mapped IPv6 form), the connection to a refused address is not made.
func TestGuardRefusesWhatIsConnectedTo(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "secret") }))
	defer ts.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ts.URL, "http://"))
	g := New(nil, nil)
	client := &http.Client{Transport: g.Transport()}
	for _, host := range []string{"127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "127.1", "0x7f.1", "[::1]"} {
		resp, err := client.Get("http://" + host + ":" + port + "/v2/")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: connected", host)
			continue
		}
		if !errors.Is(err, ErrRefused) && !strings.Contains(err.Error(), "no such host") && !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s: %v, want ErrRefused", host, err)
		}
	}
	// Allowed by CIDR: connected.
	allowed := &http.Client{Transport: New(nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}).Transport()}
	resp, err := allowed.Get(ts.URL + "/v2/")
	if err != nil {
		t.Fatalf("an allowed address: %v", err)
	}
	resp.Body.Close()
}

func TestGuardRanges(t *testing.T) {
	g := New([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, []netip.Prefix{netip.MustParsePrefix("10.96.5.5/32")})
	for ip, refused := range map[string]bool{
		"127.0.0.1": true, "169.254.169.254": true, "::1": true, "fe80::1": true, "0.0.0.0": true,
		"::ffff:169.254.169.254": true, "10.96.0.1": true, "10.96.5.5": false, "192.168.1.10": false, "203.0.113.7": false,
		"fd00:ec2::254": true, "224.0.0.1": true,
	} {
		err := g.Check(netip.MustParseAddr(ip))
		if (err != nil) != refused {
			t.Errorf("%s: %v, want refused %v", ip, err, refused)
		}
	}
}

// A registry's error answer reaches nobody but as its error codes: not a
// metadata service's document, not a message of the registry's choosing.
func TestErrorBodiesAreCutToRegistryCodes(t *testing.T) {
	for body, want := range map[string]string{
		`{"errors":[{"code":"UNAUTHORIZED","message":"the token is hunter2","detail":{"x":1}}]}`: `{"errors":[{"code":"UNAUTHORIZED"}]}`,
		`ami-id\ninstance-id\niam/security-credentials/role`:                                     ``,
		`{"errors":[{"code":"<script>","message":"x"}]}`:                                         ``,
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, body)
		}))
		resp, err := (&RegistryErrors{Next: http.DefaultTransport}).RoundTrip(httptest.NewRequest(http.MethodGet, ts.URL, nil).WithContext(context.Background()))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		if string(got) != want || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%q: %d %q, want 401 %q", body, resp.StatusCode, got, want)
		}
		ts.Close()
	}
}

// An address:port allowed is that port only: the registry, not the other
// servers of the same address.
func TestGuardAllowsOnePort(t *testing.T) {
	g := New(nil, nil)
	_, ports, err := ParseAllowed("127.0.0.1:5000")
	if err != nil {
		t.Fatal(err)
	}
	g.AllowPorts(ports)
	if err := g.control("tcp", "127.0.0.1:5000", nil); err != nil {
		t.Errorf("the allowed port: %v", err)
	}
	for _, a := range []string{"127.0.0.1:8080", "[::ffff:127.0.0.1]:8095", "[::1]:5000"} {
		if err := g.control("tcp", a, nil); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want ErrRefused", a, err)
		}
	}
}
