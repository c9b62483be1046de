package variables

import (
	"fmt"
	"strconv"
	"strings"
)

// referenceOperators may prefix a reference: "$(<./../x)" compares with
// the referenced value as "<value".
var referenceOperators = []string{">=", "<=", "!", ">", "<"}

// maxReferenceDepth bounds references to values that are references.
const maxReferenceDepth = 16

// ResolveReferences returns root with every "$(./relative/path)" reference
// in its string values replaced by the value found at that path of root
// itself (Kyverno's "variables from policy definitions"). The path is
// relative to the referencing field: "$(./../../readinessProbe/port)" in
// spec.containers[0].livenessProbe.port names
// spec.containers[0].readinessProbe.port. Path elements are map keys
// (matched without their anchors, so "containers" finds "^(containers)") or
// array indexes. An operator may lead the path ("$(<./../port)"): it leads
// the result ("<3000"). A reference that is the whole string keeps the
// referenced value's type; one inside a longer string is formatted into it.
// "\$(" escapes a reference. A path leaving root or naming nothing is an
// error. Strings with "$(" not followed by "./" or "../" are left alone.
func ResolveReferences(root any) (any, error) {
	if !hasReferences(root) {
		return root, nil
	}
	r := &resolver{root: root}
	return r.walk(root, nil)
}

// hasReferences reports whether a string of v holds "$(".
func hasReferences(v any) bool {
	switch t := v.(type) {
	case string:
		return strings.Contains(t, "$(")
	case map[string]any:
		for _, val := range t {
			if hasReferences(val) {
				return true
			}
		}
	case []any:
		for _, val := range t {
			if hasReferences(val) {
				return true
			}
		}
	}
	return false
}

type resolver struct {
	root  any
	depth int
}

func (r *resolver) walk(v any, path []string) (any, error) {
	switch t := v.(type) {
	case string:
		if !strings.Contains(t, "$(") {
			return t, nil
		}
		return r.resolveString(t, path)
	case map[string]any:
		if !hasReferences(t) {
			return t, nil
		}
		out := make(map[string]any, len(t))
		for k, val := range t {
			nv, err := r.walk(val, append(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = nv
		}
		return out, nil
	case []any:
		if !hasReferences(t) {
			return t, nil
		}
		out := make([]any, len(t))
		for i, val := range t {
			nv, err := r.walk(val, append(path, strconv.Itoa(i)))
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	}
	return v, nil
}

// reference is one "$( )" of a string.
type reference struct {
	start, end int // [start, end) covers "$(...)"
	op, path   string
	escaped    bool
}

func findReferences(s string) []reference {
	var out []reference
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], "$(")
		if j < 0 {
			break
		}
		start := i + j
		k := strings.IndexByte(s[start:], ')')
		if k < 0 {
			break
		}
		body := s[start+2 : start+k]
		i = start + k + 1
		op := ""
		for _, o := range referenceOperators {
			if strings.HasPrefix(body, o) {
				op, body = o, body[len(o):]
				break
			}
		}
		if !strings.HasPrefix(body, "./") && !strings.HasPrefix(body, "../") || strings.ContainsAny(body, " \t\n") {
			continue
		}
		out = append(out, reference{
			start: start, end: start + k + 1, op: op, path: body,
			escaped: start > 0 && s[start-1] == '\\',
		})
	}
	return out
}

func (r *resolver) resolveString(s string, path []string) (any, error) {
	refs := findReferences(s)
	if len(refs) == 0 {
		return s, nil
	}
	if len(refs) == 1 && !refs[0].escaped && refs[0].start == 0 && refs[0].end == len(s) && refs[0].op == "" {
		return r.lookup(refs[0].path, path)
	}
	var b strings.Builder
	last := 0
	for _, ref := range refs {
		if ref.escaped {
			b.WriteString(s[last : ref.start-1]) // drop the backslash
			b.WriteString(s[ref.start:ref.end])
			last = ref.end
			continue
		}
		v, err := r.lookup(ref.path, path)
		if err != nil {
			return nil, err
		}
		b.WriteString(s[last:ref.start])
		b.WriteString(ref.op)
		b.WriteString(format(v))
		last = ref.end
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// lookup finds the value a relative path names from the field at path.
func (r *resolver) lookup(rel string, path []string) (any, error) {
	abs := append([]string(nil), path...)
	for _, part := range strings.Split(rel, "/") {
		switch part {
		case "", ".":
		case "..":
			if len(abs) == 0 {
				return nil, fmt.Errorf("reference $(%s) leaves the document", rel)
			}
			abs = abs[:len(abs)-1]
		default:
			abs = append(abs, part)
		}
	}
	cur := r.root
	for _, part := range abs {
		switch t := cur.(type) {
		case map[string]any:
			v, ok := t[part]
			if !ok {
				v, ok = anchored(t, part)
			}
			if !ok {
				return nil, fmt.Errorf("reference $(%s): %q not found", rel, part)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(t) {
				return nil, fmt.Errorf("reference $(%s): no element %q", rel, part)
			}
			cur = t[i]
		default:
			return nil, fmt.Errorf("reference $(%s): %q not found", rel, part)
		}
	}
	if s, ok := cur.(string); ok && strings.Contains(s, "$(") {
		if r.depth >= maxReferenceDepth {
			return nil, fmt.Errorf("reference $(%s): references nest more than %d deep", rel, maxReferenceDepth)
		}
		r.depth++
		defer func() { r.depth-- }()
		return r.resolveString(s, abs)
	}
	return cur, nil
}

// anchored finds a key written with an anchor: "^(containers)" for
// "containers".
func anchored(m map[string]any, key string) (any, bool) {
	for k, v := range m {
		if k != key && stripAnchor(k) == key {
			return v, true
		}
	}
	return nil, false
}
