package match

import (
	"fmt"
	"strings"
)

// KindSelector is one parsed entry of resources.kinds. A part that the entry
// leaves out is "*": "Pod" selects the kind Pod in any group and version.
// Every part may hold the wildcards `*` and `?`.
type KindSelector struct {
	Group, Version, Kind string
	// Subresource is "" for the resource itself, "*" for the resource and
	// all its subresources.
	Subresource string
}

// ParseKind parses an entry of resources.kinds. The accepted forms are
//
//	Kind                     Pod, *
//	Version/Kind             v1/Pod, */Pod
//	Group/Version/Kind       apps/v1/Deployment, apps/*/Deployment, apps/*/*
//	Kind/Subresource         Pod/status, Deployment/scale
//	Version/Kind/Subresource v1/Pod/status, */Node/status
//	Group/Version/Kind/Sub   apps/v1/Deployment/scale
//	*/*                      every kind and every subresource
//
// and the subresource may follow the kind after a dot instead of a slash
// (Pod.status, v1/Pod.eviction). Two- and three-part forms are told apart by
// the case of the part that could be a kind: kinds start with an upper-case
// letter, versions and groups do not.
func ParseKind(s string) (KindSelector, error) {
	if s == "" {
		return KindSelector{}, fmt.Errorf("empty kind")
	}
	parts := strings.Split(s, "/")
	for _, p := range parts {
		if p == "" && len(parts) != 3 {
			return KindSelector{}, fmt.Errorf("invalid kind %q", s)
		}
	}
	var k KindSelector
	switch len(parts) {
	case 1:
		k = KindSelector{Group: "*", Version: "*"}
		k.Kind, k.Subresource = splitSubresource(parts[0])
	case 2:
		switch {
		case parts[0] == "*" && parts[1] == "*":
			k = KindSelector{Group: "*", Version: "*", Kind: "*", Subresource: "*"}
		case startsUpper(parts[0]):
			k = KindSelector{Group: "*", Version: "*", Kind: parts[0], Subresource: parts[1]}
		default:
			k = KindSelector{Group: "*", Version: parts[0]}
			k.Kind, k.Subresource = splitSubresource(parts[1])
		}
	case 3:
		if startsUpper(parts[1]) {
			k = KindSelector{Group: "*", Version: parts[0], Kind: parts[1], Subresource: parts[2]}
		} else {
			// The core group may be spelt out as an empty first part: "/v1/Pod".
			k = KindSelector{Group: parts[0], Version: parts[1]}
			k.Kind, k.Subresource = splitSubresource(parts[2])
		}
	case 4:
		k = KindSelector{Group: parts[0], Version: parts[1], Kind: parts[2], Subresource: parts[3]}
	default:
		return KindSelector{}, fmt.Errorf("invalid kind %q: too many parts", s)
	}
	if k.Kind == "" || k.Version == "" {
		return KindSelector{}, fmt.Errorf("invalid kind %q", s)
	}
	return k, nil
}

// splitSubresource splits "Kind.subresource"; kinds never hold a dot.
func splitSubresource(s string) (kind, sub string) {
	if i := strings.IndexByte(s, '.'); i > 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func startsUpper(s string) bool {
	return s != "" && s[0] >= 'A' && s[0] <= 'Z'
}

// String renders the selector in its four-part form.
func (k KindSelector) String() string {
	return k.Group + "/" + k.Version + "/" + k.Kind + "/" + k.Subresource
}

// Matches reports whether the selector selects a resource of the given group,
// version and kind, or one of its subresources ("" for the resource itself).
// A selector of the Pod resource itself also selects the ephemeralcontainers
// subresource of Pods, so that Pod rules see containers added by kubectl debug.
func (k KindSelector) Matches(group, version, kind, subresource string) bool {
	if !wildcardMatch(k.Kind, kind) || !wildcardMatch(k.Version, version) || !wildcardMatch(k.Group, group) {
		return false
	}
	if wildcardMatch(k.Subresource, subresource) {
		return true
	}
	return k.Subresource == "" && subresource == "ephemeralcontainers" && kind == "Pod" && group == ""
}

// isPod reports whether the selector names exactly the Pod resource: kind Pod,
// no subresource, and no group or version other than the core v1 one.
func (k KindSelector) isPod() bool {
	return k.Kind == "Pod" && k.Subresource == "" &&
		(k.Group == "*" || k.Group == "") && (k.Version == "*" || k.Version == "v1")
}

// containsPod reports whether one of kinds names the Pod resource.
func containsPod(kinds []string) bool {
	for _, s := range kinds {
		if k, err := ParseKind(s); err == nil && k.isPod() {
			return true
		}
	}
	return false
}
