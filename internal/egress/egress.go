// Package egress guards the scanner's connections to image registries
// (issue 53): a policy names the registry (a Pod's image reference, an
// imageReferences pattern, an attestor's repository), so a tenant could
// otherwise make the scanner connect to its own loopback servers, the
// cloud's metadata address or the cluster's Services. The address checked
// is the one connected to, after name resolution, at every connection
// (a name resolving to a refused address is refused, however spelled:
// 127.1, 0x7f000001, [::ffff:127.0.0.1], a DNS name).
package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Always are the ranges refused unless allowed: loopback, link-local
// (169.254.169.254, the cloud's metadata service, among them), unspecified,
// multicast and the IPv4-mapped forms of these.
var Always = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
}

// ErrRefused is the error of a connection to a refused address.
var ErrRefused = errors.New("refused: the address is loopback, link-local or the cluster's (allow it with tally-scanner --registry-allow-cidrs)")

// Guard says which addresses may be connected to. The zero Guard refuses
// Always.
type Guard struct {
	mu sync.RWMutex
	// deny are refused besides Always (the cluster's Service and Pod
	// ranges, --registry-deny-cidrs); allow are allowed all the same
	// (--registry-allow-cidrs), and allowPorts, one port of an address
	// each.
	deny, allow []netip.Prefix
	allowPorts  []netip.AddrPort
}

// New makes a Guard refusing Always and deny, but allow.
func New(deny, allow []netip.Prefix) *Guard {
	return &Guard{deny: deny, allow: allow}
}

// AllowPorts allows, besides, these address and port pairs (a registry
// on an address otherwise refused, and nothing else there).
func (g *Guard) AllowPorts(ports []netip.AddrPort) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allowPorts = ports
}

// SetDeny replaces the ranges refused besides Always (the cluster's, read
// again from time to time).
func (g *Guard) SetDeny(deny []netip.Prefix) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deny = deny
}

// Check says whether an address may be connected to.
func (g *Guard) Check(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, p := range g.allow {
		if p.Contains(ip) {
			return nil
		}
	}
	for _, set := range [][]netip.Prefix{Always, g.deny} {
		for _, p := range set {
			if p.Contains(ip) {
				return fmt.Errorf("%s: %w", ip, ErrRefused)
			}
		}
	}
	return nil
}

// control is a net.Dialer's Control: it runs once the address to connect
// to is known, for every address tried.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%s: %w", address, err)
	}
	g.mu.RLock()
	for _, p := range g.allowPorts {
		if p.Addr() == ap.Addr().Unmap().WithZone("") && p.Port() == ap.Port() {
			g.mu.RUnlock()
			return nil
		}
	}
	g.mu.RUnlock()
	return g.Check(ap.Addr())
}

// Transport is http.DefaultTransport's configuration with g checking
// every connection and no proxy (a proxy would connect where g cannot
// see); the bodies of error answers are cut down to the registry's error
// codes (RegistryErrors).
func (g *Guard) Transport() http.RoundTripper {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = d.DialContext
	return &RegistryErrors{Next: tr}
}

// RegistryErrors is a transport that never lets a registry's words reach
// a report: the body of an answer of status 400 or more is replaced by
// the registry error codes it held (the OCI distribution spec's
// UNAUTHORIZED, MANIFEST_UNKNOWN, ...), without their messages or details,
// or by nothing. A server that is not a registry (a metadata service, an
// internal API) has nothing of its answer shown.
type RegistryErrors struct{ Next http.RoundTripper }

// maxErrorBody bounds the error body read to find its codes.
const maxErrorBody = 64 << 10

func (t *RegistryErrors) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.Next.RoundTrip(r)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	body := codesOnly(raw)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	resp.Header.Del("Content-Encoding")
	if len(body) > 0 {
		resp.Header.Set("Content-Type", "application/json")
	} else {
		resp.Header.Del("Content-Type")
	}
	return resp, nil
}

// codesOnly is the registry error body {"errors":[{"code":...}]} with its
// codes alone, when they are codes (upper-case words); nil otherwise.
func codesOnly(raw []byte) []byte {
	var in struct {
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}
	if json.Unmarshal(raw, &in) != nil || len(in.Errors) == 0 {
		return nil
	}
	type code struct {
		Code string `json:"code"`
	}
	var out struct {
		Errors []code `json:"errors"`
	}
	for _, e := range in.Errors {
		if e.Code != "" && len(e.Code) <= 64 && strings.Trim(e.Code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == "" {
			out.Errors = append(out.Errors, code{e.Code})
		}
	}
	if len(out.Errors) == 0 {
		return nil
	}
	b, _ := json.Marshal(out)
	return b
}

// DialContext is the guarded dialer's DialContext (for clients that are
// not HTTP).
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, Control: g.control}
	return d.DialContext(ctx, network, address)
}

// ParsePrefixes parses CIDRs (or single addresses) separated by commas.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	p, ports, err := ParseAllowed(s)
	if err == nil && len(ports) > 0 {
		err = fmt.Errorf("%s: an address with a port is not a CIDR", ports[0])
	}
	return p, err
}

// ParseAllowed parses CIDRs, single addresses and address:port pairs
// ("10.96.12.34:5000", "[fd00::1]:5000"), separated by commas.
func ParseAllowed(s string) ([]netip.Prefix, []netip.AddrPort, error) {
	var out []netip.Prefix
	var ports []netip.AddrPort
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if ap, err := netip.ParseAddrPort(f); err == nil {
			ports = append(ports, netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()))
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, nil, fmt.Errorf("%q is not an address, an address:port or a CIDR", f)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, nil, fmt.Errorf("%q is not a CIDR", f)
		}
		out = append(out, p.Masked())
	}
	return out, ports, nil
}
