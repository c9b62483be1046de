package pattern

import (
	"sort"

	"github.com/tally-dev/tally/engine/wildcard"
)

// AnchorKeysMissing says, for a resource that failed a pattern, whether
// Kyverno reports the failure as an error instead: Kyverno records, for
// every pattern object it compares with a resource object on its way, the
// conditional, existence and negation anchor keys of the pattern object and
// whether some resource object it met had the key; when the pattern fails
// (not a skip, not a negation) and an anchor key other than a negation was
// never found, the rule is an error ("execution error: ..."), not a fail.
//
// What Kyverno meets depends on the order it walks in and where it stops
// (the first failing element of a list, the first failing key of an
// object); the census walks the same way, deciding each element as
// Validate does.
func AnchorKeysMissing(resource, pattern any) bool {
	c := census{seen: map[string]bool{}}
	c.element(resource, pattern, scopeNone)
	for k, found := range c.seen {
		if a, _ := parseKey(k); !found && a != anchorNegation {
			return true
		}
	}
	return false
}

type census struct {
	seen map[string]bool
	e    evaluator // deciding only (no explanations)
}

// register records the anchor keys of a pattern object met with a resource
// object, and whether the resource object has them.
func (c *census) register(pat, res map[string]any) {
	for k := range pat {
		a, name := parseKey(k)
		if a != anchorCondition && a != anchorExistence && a != anchorNegation {
			continue
		}
		if c.seen[k] {
			continue
		}
		_, has := res[name]
		c.seen[k] = has
	}
}

func (c *census) element(res, pat any, sc scope) Status {
	switch p := pat.(type) {
	case map[string]any:
		m, ok := res.(map[string]any)
		if !ok {
			return Fail
		}
		c.register(p, m)
		return c.object(m, p, sc)
	case []any:
		l, ok := res.([]any)
		if !ok {
			return Fail
		}
		if len(p) > 0 {
			if pm, ok := p[0].(map[string]any); ok {
				applied, skipped := 0, 0
				for _, el := range l {
					switch c.element(el, pm, scopeNone) {
					case Fail:
						return Fail
					case Skip:
						skipped++
					default:
						applied++
					}
				}
				if applied == 0 && skipped > 0 {
					return Skip
				}
				return Pass
			}
		}
	}
	return c.e.eval(res, pat, sc).status
}

// object walks a resource object as Kyverno does: its anchors first, in
// key order, then the other keys, those holding anchors (and global
// anchors) first.
func (c *census) object(res, pat map[string]any, sc scope) Status {
	var anchors, plain []string
	for k := range pat {
		switch a, _ := parseKey(k); a {
		case anchorCondition, anchorExistence, anchorEquality, anchorNegation:
			anchors = append(anchors, k)
		default:
			plain = append(plain, k)
		}
	}
	sort.Strings(anchors)
	skips, applied := 0, 0
	for _, k := range anchors {
		a, name := parseKey(k)
		v, present := res[name]
		var st Status
		switch a {
		case anchorCondition:
			st = Skip
			if present && c.element(v, pat[k], childScope(sc, name)) == Pass {
				st = Pass
			}
		case anchorEquality:
			st = Pass
			if present {
				st = c.element(v, pat[k], childScope(sc, name))
			}
		case anchorNegation:
			st = Pass
			if present {
				st = Fail
			}
		default: // existence
			st = c.e.evalField(v, present, a, name, pat[k], childScope(sc, name)).status
		}
		switch st {
		case Skip:
			skips++
			continue
		case Fail:
			return Fail
		}
		applied++
	}
	if skips > 0 && applied == 0 {
		return Skip
	}
	sort.Strings(plain)
	var front, back []string
	for _, k := range plain {
		if a, _ := parseKey(k); a == anchorGlobal || containsAnchor(pat[k]) {
			front = append([]string{k}, front...)
		} else {
			back = append(back, k)
		}
	}
	for _, k := range append(front, back...) {
		a, name := parseKey(k)
		v, present := res[name]
		var st Status
		switch {
		case a == anchorGlobal || (sc == scopeMetaKeys && wildcard.Has(name)):
			st = c.e.evalEntry(res, a, name, pat[k], sc).status
		case a == anchorNone:
			switch pat[k].(type) {
			case map[string]any, []any:
				st = c.element(v, pat[k], childScope(sc, name))
			default:
				st = c.e.evalField(v, present, a, name, pat[k], childScope(sc, name)).status
			}
		default:
			st = c.e.evalEntry(res, a, name, pat[k], sc).status
		}
		if st != Pass {
			return st
		}
	}
	return Pass
}
