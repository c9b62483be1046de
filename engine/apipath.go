package engine

import (
	"fmt"
	"net/url"
	"strings"
)

// APIPath is an apiCall's urlPath as it is sent: an absolute path of the
// API server, each segment as written (nothing to clean, nothing escaped),
// and its query.
type APIPath struct {
	Path  string
	Query url.Values
}

// String is the path with its query, as the call is named in messages.
func (p APIPath) String() string {
	if len(p.Query) == 0 {
		return p.Path
	}
	return p.Path + "?" + p.Query.Encode()
}

// ParseAPIPath parses an apiCall's urlPath (variables substituted) into
// what is sent, and refuses, for every policy, what could make the path
// sent differ from the path read: a scheme, host or user; a fragment
// ("#"); a relative path; an empty segment ("//", a trailing "/"); a dot
// segment ("." or ".."); an escaped byte ("%2F", "%2e"), a backslash, a
// space or any byte outside the characters of Kubernetes names and API
// paths. A watch (or a log follow) is refused too: it is not a read that
// ends, and it would hold a worker until its timeout. Kubernetes' own
// clients clean a path before sending it (path.Join): a path they would
// change is refused rather than sent changed.
func ParseAPIPath(s string) (APIPath, error) {
	raw, query, hasQuery := strings.Cut(s, "?")
	if strings.ContainsAny(s, "#") {
		return APIPath{}, fmt.Errorf("urlPath %q: a fragment (#) is not allowed", s)
	}
	if !strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, "//") {
		return APIPath{}, fmt.Errorf("urlPath %q: an absolute path of the API server is required (/api/... or /apis/...)", s)
	}
	segs := strings.Split(raw[1:], "/")
	if (len(segs) > 2 && segs[0] == "api" && segs[2] == "watch") || (len(segs) > 3 && segs[0] == "apis" && segs[3] == "watch") {
		return APIPath{}, fmt.Errorf("urlPath %q: a watch is not allowed (an apiCall reads, and its read ends)", s)
	}
	for _, seg := range segs {
		switch {
		case seg == "":
			return APIPath{}, fmt.Errorf("urlPath %q: an empty segment (// or a trailing /) is not allowed", s)
		case seg == "." || seg == "..":
			return APIPath{}, fmt.Errorf("urlPath %q: a dot segment (%s) is not allowed", s, seg)
		}
		for i := 0; i < len(seg); i++ {
			if !pathByte(seg[i]) {
				return APIPath{}, fmt.Errorf("urlPath %q: the character %q is not allowed in a path segment (no escapes, spaces or backslashes)", s, seg[i])
			}
		}
	}
	p := APIPath{Path: raw}
	if hasQuery {
		if strings.ContainsAny(query, "\\ \t\r\n") {
			return APIPath{}, fmt.Errorf("urlPath %q: the query has a space or a backslash", s)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return APIPath{}, fmt.Errorf("urlPath %q: the query: %w", s, err)
		}
		for _, k := range []string{"watch", "follow"} {
			if _, ok := q[k]; ok {
				return APIPath{}, fmt.Errorf("urlPath %q: %s is not allowed (an apiCall reads, and its read ends)", s, k)
			}
		}
		if len(q) > 0 {
			p.Query = q
		}
	}
	return p, nil
}

// pathByte says whether b may appear in a segment of an API path as
// written: the characters of Kubernetes names (RBAC's "system:..." and
// the like included) and nothing that an encoder or a cleaner changes.
func pathByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("-._~:@+=", b) >= 0
}

// InNamespacePath says whether a path parsed by ParseAPIPath reads only
// namespace ns: the namespace itself (/api/v1/namespaces/<ns>), or objects
// under /api/<version>/namespaces/<ns>/ or
// /apis/<group>/<version>/namespaces/<ns>/.
func InNamespacePath(p, ns string) bool {
	if ns == "" || !strings.HasPrefix(p, "/") {
		return false
	}
	if _, err := ParseAPIPath(p); err != nil {
		return false
	}
	segs := strings.Split(p[1:], "/")
	switch {
	case len(segs) >= 4 && segs[0] == "api" && segs[2] == "namespaces":
		return segs[3] == ns
	case len(segs) >= 6 && segs[0] == "apis" && segs[3] == "namespaces":
		return segs[4] == ns
	}
	return false
}
