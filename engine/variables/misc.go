package variables

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// DefaultRegistry is the registry image_normalize gives an image that names
// none, as Kyverno's default configuration does.
var DefaultRegistry = "docker.io"

// jpImageNormalize writes an image reference in full: registry, path, and
// the tag "latest" when it has neither tag nor digest ("nginx" is
// "docker.io/nginx:latest").
func jpImageNormalize(a []any) (any, error) {
	ref := str(a[0])
	if ref == "" || strings.ContainsAny(ref, " \t\n") {
		return nil, fmt.Errorf("image_normalize: %q is not an image reference", ref)
	}
	name, digest, _ := strings.Cut(ref, "@")
	tag := ""
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, tag = name[:i], name[i+1:]
		if tag == "" {
			return nil, fmt.Errorf("image_normalize: %q has an empty tag", ref)
		}
	}
	if name == "" || strings.HasSuffix(name, "/") || strings.Contains(name, "//") {
		return nil, fmt.Errorf("image_normalize: %q is not an image reference", ref)
	}
	first, _, hasSlash := strings.Cut(name, "/")
	if !hasSlash || !(strings.ContainsAny(first, ".:") || first == "localhost") {
		name = DefaultRegistry + "/" + name
	}
	if tag == "" && digest == "" {
		tag = "latest"
	}
	out := name
	if tag != "" {
		out += ":" + tag
	}
	if digest != "" {
		out += "@" + digest
	}
	return out, nil
}

// jpX509Decode decodes a PEM certificate or certificate signing request into
// an object with the fields of Go's x509.Certificate or CertificateRequest;
// an RSA public key's modulus N is a decimal string.
func jpX509Decode(a []any) (any, error) {
	block, _ := pem.Decode([]byte(str(a[0])))
	if block == nil {
		return nil, errors.New("x509_decode: no PEM data found")
	}
	var v any
	var pub any
	switch block.Type {
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("x509_decode: %w", err)
		}
		v, pub = cert, cert.PublicKey
	case "CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST":
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("x509_decode: %w", err)
		}
		v, pub = csr, csr.PublicKey
	default:
		return nil, fmt.Errorf("x509_decode: PEM block of type %q is neither a certificate nor a request", block.Type)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("x509_decode: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("x509_decode: %w", err)
	}
	if k, ok := pub.(*rsa.PublicKey); ok {
		if m, ok := out["PublicKey"].(map[string]any); ok {
			m["N"] = k.N.String()
		}
	}
	return Normalize(out), nil
}

// maxRandom bounds what random() generates.
const maxRandom = 4096

// jpRandom generates a string matching a regular expression:
// random('[a-z0-9]{6}'). Unbounded repetitions repeat at most 10 more times
// than their minimum.
func jpRandom(a []any) (any, error) {
	re, err := syntax.Parse(str(a[0]), syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("random: %w", err)
	}
	var b strings.Builder
	if err := generate(&b, re); err != nil {
		return nil, fmt.Errorf("random: %w", err)
	}
	return b.String(), nil
}

func generate(b *strings.Builder, re *syntax.Regexp) error {
	if b.Len() > maxRandom {
		return fmt.Errorf("the output would exceed %d bytes", maxRandom)
	}
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			b.WriteRune(r)
		}
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return errors.New("empty character class")
		}
		// Pick a range weighted by its size, then a rune in it.
		var total int64
		for i := 0; i+1 < len(re.Rune); i += 2 {
			total += int64(re.Rune[i+1]-re.Rune[i]) + 1
		}
		n := rand.Int64N(total)
		for i := 0; i+1 < len(re.Rune); i += 2 {
			size := int64(re.Rune[i+1]-re.Rune[i]) + 1
			if n < size {
				r := re.Rune[i] + rune(n)
				if !utf8.ValidRune(r) {
					r = re.Rune[i]
				}
				b.WriteRune(r)
				break
			}
			n -= size
		}
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteByte(byte(' ' + 1 + rand.IntN(94))) // printable ASCII
	case syntax.OpCapture:
		return generate(b, re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if err := generate(b, sub); err != nil {
				return err
			}
		}
	case syntax.OpAlternate:
		return generate(b, re.Sub[rand.IntN(len(re.Sub))])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := 0, 10
		switch re.Op {
		case syntax.OpPlus:
			lo, hi = 1, 11
		case syntax.OpQuest:
			hi = 1
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
			if hi < 0 {
				hi = lo + 10
			}
		}
		n := lo
		if hi > lo {
			n += rand.IntN(hi - lo + 1)
		}
		for range n {
			if err := generate(b, re.Sub[0]); err != nil {
				return err
			}
		}
	case syntax.OpNoMatch:
		return errors.New("the expression matches nothing")
	}
	// Anchors and empty matches write nothing.
	return nil
}

// LookupHost resolves host names for is_external_url. Nil (the default)
// keeps the engine free of network I/O: a name is then external unless it
// is local by its form (see jpIsExternalURL).
var LookupHost func(host string) ([]net.IP, error)

// jpIsExternalURL tells whether a URL points outside the cluster: its host
// is a public IP address, or a name that resolves to one (with LookupHost)
// or that is not local by its form (localhost, a single label, or under
// .local, .localdomain, .internal, .svc, .cluster.local). Invalid URLs are
// not external.
func jpIsExternalURL(a []any) (any, error) {
	u, err := url.Parse(str(a[0]))
	if err != nil || u.Hostname() == "" {
		return false, nil
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if ip := net.ParseIP(host); ip != nil {
		return publicIP(ip), nil
	}
	if LookupHost != nil {
		ips, err := LookupHost(host)
		if err != nil {
			return nil, fmt.Errorf("is_external_url: %w", err)
		}
		for _, ip := range ips {
			if publicIP(ip) {
				return true, nil
			}
		}
		return false, nil
	}
	if host == "localhost" || !strings.Contains(host, ".") {
		return false, nil
	}
	for _, suffix := range []string{".localhost", ".local", ".localdomain", ".internal", ".svc", ".cluster.local"} {
		if strings.HasSuffix(host, suffix) {
			return false, nil
		}
	}
	return true, nil
}

func publicIP(ip net.IP) bool {
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsInterfaceLocalMulticast())
}
