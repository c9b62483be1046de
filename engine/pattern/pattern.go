package pattern

import (
	"github.com/tally-dev/tally/engine/wildcard"

	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Status is the outcome of matching a resource against a pattern.
type Status int

const (
	// Pass: the resource satisfies the pattern.
	Pass Status = iota
	// Fail: the resource violates the pattern.
	Fail
	// Skip: a conditional or global anchor did not hold, so the pattern does
	// not apply to the resource.
	Skip
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "pass"
	case Fail:
		return "fail"
	case Skip:
		return "skip"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Result of matching a resource against a pattern.
type Result struct {
	Status Status
	// Path is, for Fail and Skip, where the decision was made, in Kyverno's
	// form: "/spec/containers/0/image/" (leading and trailing slash, list
	// indexes). It is empty for Pass.
	Path string
	// Message is a human-readable reason. It quotes the pattern but never the
	// resource's values, which may be secret.
	Message string
	// Patterns holds, for ValidateAny only, the result of each pattern that
	// did not pass, in order.
	Patterns []Result
}

// Validate matches a resource against a validate pattern. Both use the JSON
// data model: map[string]any, []any, string, bool, nil and numbers.
func Validate(resource, pattern any) Result {
	var fast evaluator
	if fast.eval(resource, pattern, scopeNone).status == Pass {
		return Result{Status: Pass}
	}
	// Evaluation is pure, so a second run that records paths and messages
	// reaches the same decision; only non-passing results pay for it.
	var buf [256]byte
	x := evaluator{explain: true, path: append(buf[:0], '/')}
	o := x.eval(resource, pattern, scopeNone)
	return Result{Status: o.status, Path: o.path, Message: o.msg}
}

// ValidateAny implements anyPattern: Pass if any pattern passes, Skip if every
// pattern was skipped, else Fail. A Fail's Path is that of the first failing
// pattern and its Message lists every failing pattern as Kyverno does
// ("anyPattern[0] failed at path /spec/... anyPattern[1] failed at path ...");
// Patterns holds the result of each pattern.
func ValidateAny(resource any, patterns []any) Result {
	if len(patterns) == 0 {
		return Result{Status: Fail, Path: "/", Message: "anyPattern has no patterns"}
	}
	results := make([]Result, 0, len(patterns))
	for _, p := range patterns {
		r := Validate(resource, p)
		if r.Status == Pass {
			return Result{Status: Pass}
		}
		results = append(results, r)
	}
	var msg strings.Builder
	out := Result{Status: Skip, Patterns: results}
	for i, r := range results {
		if r.Status != Fail {
			continue
		}
		if out.Status != Fail {
			out.Status, out.Path = Fail, r.Path
		} else {
			msg.WriteByte(' ')
		}
		fmt.Fprintf(&msg, "anyPattern[%d] failed at path %s", i, r.Path)
	}
	if out.Status == Skip {
		out.Path = results[0].Path
		for i, r := range results {
			if i > 0 {
				msg.WriteString("; ")
			}
			fmt.Fprintf(&msg, "anyPattern[%d] skipped: %s", i, r.Message)
		}
	}
	out.Message = msg.String()
	return out
}

// evaluator walks a pattern and a resource together. With explain unset it
// only decides, allocating nothing; with explain set it also tracks the path
// and builds messages.
type evaluator struct {
	explain bool
	path    []byte
}

// outcome is the decision about one element.
type outcome struct {
	status Status
	global bool   // a Skip caused by a global anchor: it skips the whole rule
	path   string // explain only
	msg    string // explain only
}

var (
	passed = outcome{}
	failed = outcome{status: Fail}
)

// scope tells whether a map holds metadata labels or annotations, whose
// pattern keys may contain wildcards.
type scope uint8

const (
	scopeNone scope = iota
	scopeMetadata
	scopeMetaKeys
)

func childScope(s scope, key string) scope {
	switch {
	case key == "metadata":
		return scopeMetadata
	case s == scopeMetadata && (key == "labels" || key == "annotations"):
		return scopeMetaKeys
	}
	return scopeNone
}

func (e *evaluator) push(key string) int {
	n := len(e.path)
	if e.explain {
		e.path = append(append(e.path, key...), '/')
	}
	return n
}

func (e *evaluator) pushIndex(i int) int {
	n := len(e.path)
	if e.explain {
		e.path = append(strconv.AppendInt(e.path, int64(i), 10), '/')
	}
	return n
}

func (e *evaluator) pop(n int) {
	if e.explain {
		e.path = e.path[:n]
	}
}

// failf builds a Fail at the current path; call it only when explaining.
func (e *evaluator) failf(format string, args ...any) outcome {
	return outcome{status: Fail, path: string(e.path), msg: fmt.Sprintf(format, args...)}
}

// eval matches one resource element against one pattern element.
func (e *evaluator) eval(res, pat any, sc scope) outcome {
	switch p := pat.(type) {
	case map[string]any:
		m, ok := res.(map[string]any)
		if !ok {
			if !e.explain {
				return failed
			}
			return e.failf("pattern and resource have different structures. Path: %s. Expected %T, found %T", e.path, pat, res)
		}
		return e.evalMap(m, p, sc)
	case []any:
		l, ok := res.([]any)
		if !ok {
			if !e.explain {
				return failed
			}
			return e.failf("validation rule failed at path %s, resource does not satisfy the expected overlay pattern", e.path)
		}
		return e.evalList(l, p)
	}
	if l, ok := res.([]any); ok {
		// A scalar pattern applies to every element of a list.
		for _, el := range l {
			if !MatchValue(el, pat) {
				if !e.explain {
					return failed
				}
				return e.mismatch(res, pat)
			}
		}
		return passed
	}
	if MatchValue(res, pat) {
		return passed
	}
	if !e.explain {
		return failed
	}
	return e.mismatch(res, pat)
}

// mismatch is the failure of a value, in Kyverno's words: they quote the
// resource's value and the pattern.
func (e *evaluator) mismatch(res, pat any) outcome {
	return e.failf("resource value '%v' does not match '%v' at path %s", goValue(res), pat, e.path)
}

// evalMap matches a resource object against a pattern object.
//
// Conditional and global anchors are evaluated first: if one does not hold,
// nothing else in the object is checked and the object is skipped. Then every
// other key is checked. When several keys do not pass, the decision is, in
// order of precedence: a skip caused by a global anchor; a failure in a key
// that is an anchor or contains one; a skip from a plain key (a list under it
// whose every element an anchor excluded); a failure of a plain key. Ties go
// to the smallest key, so the outcome and the reported path never depend on
// map order. This is Kyverno's order (anchors, then keys with nested
// anchors, then the rest) made deterministic.
//
// A skip from under an anchored key (=(initContainers) whose every element a
// conditional anchor excluded) does not decide alone, as in Kyverno, which
// holds such skips until the object's other keys have been seen: a sibling
// that applied (present in the resource, and passed) makes the object pass;
// when none applied, the object is skipped with the reasons of every such
// key, in key order, joined with "; ".
func (e *evaluator) evalMap(res, pat map[string]any, sc scope) outcome {
	// One pass evaluates every key: siblings of a failed gate are evaluated
	// for nothing, but the common case iterates the map only once.
	gate, gateKey := passed, ""
	best, bestRank, bestKey := passed, 0, ""
	applied := false
	var held []heldSkip
	for k, v := range pat {
		a, name := parseKey(k)
		o := e.evalEntry(res, a, name, v, sc)
		if o.status == Pass {
			if a != anchorCondition && a != anchorGlobal {
				if _, present := res[name]; present {
					applied = true
				}
			}
			continue
		}
		if a == anchorCondition || a == anchorGlobal {
			if gate.status == Pass || gateLess(o, k, gate, gateKey) {
				gate, gateKey = o, k
			}
			continue
		}
		if o.status == Skip && !o.global && a != anchorNone {
			held = append(held, heldSkip{key: k, outcome: o})
			continue
		}
		r := rank(o, a, v)
		if best.status == Pass || r < bestRank || (r == bestRank && k < bestKey) {
			best, bestRank, bestKey = o, r, k
		}
	}
	if gate.status != Pass {
		return gate
	}
	if best.status != Pass {
		return best
	}
	if len(held) == 0 || applied {
		return passed
	}
	return e.heldSkips(held)
}

// heldSkip is the skip of an anchored key, held until its siblings are seen.
type heldSkip struct {
	key     string
	outcome outcome
}

// heldSkips is the skip of an object none of whose keys applied: the reasons
// of its skipped anchored keys, in key order.
func (e *evaluator) heldSkips(held []heldSkip) outcome {
	if !e.explain {
		return outcome{status: Skip}
	}
	sort.Slice(held, func(i, j int) bool { return held[i].key < held[j].key })
	out := held[0].outcome
	for _, h := range held[1:] {
		out.msg += "; " + h.outcome.msg
	}
	return out
}

// gateLess orders failed gates: global anchors first, then by key.
func gateLess(o outcome, key string, than outcome, thanKey string) bool {
	if o.global != than.global {
		return o.global
	}
	return key < thanKey
}

// rank orders non-passing outcomes of the keys of one object; lower wins.
func rank(o outcome, a anchor, pat any) int {
	switch {
	case o.status == Skip && o.global:
		return 0
	case o.status == Fail && (a != anchorNone || containsAnchor(pat)):
		return 1
	case o.status == Skip: // from a plain key: anchored keys' skips are held
		return 2
	}
	return 3
}

// evalEntry checks one pattern key of an object. In metadata labels and
// annotations a key with wildcards applies to every resource key it matches;
// when it matches none, it is checked as a missing key.
func (e *evaluator) evalEntry(res map[string]any, a anchor, name string, pat any, sc scope) outcome {
	if sc == scopeMetaKeys && wildcard.Has(name) {
		best, bestRank, bestKey, matched := passed, 0, "", false
		for k, v := range res {
			if !wildcard.Match(name, k) {
				continue
			}
			matched = true
			mark := e.push(k)
			o := e.evalField(v, true, a, k, pat, scopeNone)
			e.pop(mark)
			if o.status == Pass {
				continue
			}
			r := rank(o, a, pat)
			if best.status == Pass || r < bestRank || (r == bestRank && k < bestKey) {
				best, bestRank, bestKey = o, r, k
			}
		}
		if matched {
			return best
		}
	}
	mark := e.push(name)
	v, present := res[name]
	o := e.evalField(v, present, a, name, pat, childScope(sc, name))
	e.pop(mark)
	return o
}

// evalField applies one pattern key, with its anchor, to the resource value
// v of that key (present tells whether the key exists). The path already
// ends with the key.
func (e *evaluator) evalField(v any, present bool, a anchor, name string, pat any, sc scope) outcome {
	switch a {
	case anchorCondition, anchorGlobal:
		if !present && a == anchorGlobal {
			return passed // a global anchor on an absent field holds
		}
		var o outcome
		if present {
			if o = e.eval(v, pat, sc); o.status == Pass {
				return passed
			}
		}
		if !e.explain {
			return outcome{status: Skip, global: a == anchorGlobal}
		}
		if !present {
			return outcome{status: Skip, path: string(e.path),
				msg: "conditional anchor mismatch: conditional anchor key doesn't exist in the resource"}
		}
		what := "conditional anchor mismatch: "
		if a == anchorGlobal {
			what = "global anchor mismatch: "
		}
		return outcome{status: Skip, global: a == anchorGlobal, path: string(e.path), msg: what + o.msg}
	case anchorEquality:
		if !present {
			return passed
		}
		return e.eval(v, pat, sc)
	case anchorNegation:
		if !present {
			return passed
		}
		if !e.explain {
			return failed
		}
		return e.failf("negation anchor matched in resource: %s is not allowed", e.path)
	case anchorExistence:
		if !present {
			return passed
		}
		return e.evalExistence(v, name, pat)
	case anchorAddIfAbsent:
		// +(key) only means something to mutate rules.
		return passed
	}
	if s, ok := pat.(string); ok && s == "*" {
		// "*" requires the field to exist, with any value. Like Kyverno, a
		// missing field is reported at the path of the object holding it.
		if v != nil {
			return passed
		}
		if !e.explain {
			return failed
		}
		parent := string(e.path[:len(e.path)-len(name)-1])
		return outcome{status: Fail, path: parent, msg: parent + "/" + name + " not found"}
	}
	return e.eval(v, pat, sc)
}

// evalExistence implements ^(key): the resource value is a list, and each
// element of the pattern list matches at least one of its elements.
func (e *evaluator) evalExistence(v any, name string, pat any) outcome {
	list, ok := v.([]any)
	if !ok {
		if !e.explain {
			return failed
		}
		return e.failf("invalid resource type %T: Existence ^ () anchor can be used only on list/array type resource", v)
	}
	pl, ok := pat.([]any)
	if !ok || len(pl) == 0 {
		if !e.explain {
			return failed
		}
		return e.failf("invalid pattern type %T: Pattern has to be of list to compare against resource", pat)
	}
	for _, p := range pl {
		found := false
		for i, el := range list {
			mark := e.pushIndex(i)
			o := e.eval(el, p, scopeNone)
			e.pop(mark)
			if o.status == Pass {
				found = true
				break
			}
		}
		if !found {
			if !e.explain {
				return failed
			}
			return e.failf("existence anchor validation failed at path %s", e.path)
		}
	}
	return passed
}

// evalList matches a resource list against a pattern list. Like Kyverno, the
// first pattern element decides how: an object applies to every element; a
// scalar must be matched by every element; a nested list is compared element
// by element. Further pattern elements are ignored unless they are lists.
func (e *evaluator) evalList(res, pat []any) outcome {
	if len(pat) == 0 {
		if !e.explain {
			return failed
		}
		return e.failf("pattern Array empty")
	}
	switch first := pat[0].(type) {
	case map[string]any:
		return e.evalEach(res, first)
	case []any:
		if len(res) < len(pat) {
			if !e.explain {
				return failed
			}
			return e.failf("validate Array failed, array length mismatch, resource Array len is %d and pattern Array len is %d", len(res), len(pat))
		}
		for i, p := range pat {
			mark := e.pushIndex(i)
			o := e.eval(res[i], p, scopeNone)
			e.pop(mark)
			if o.status != Pass {
				return o
			}
		}
		return passed
	default:
		return e.eval(res, first, scopeNone)
	}
}

// evalEach applies an object pattern to every element of a list. Elements
// whose conditional or global anchors do not hold are skipped; the first
// failing element fails the list; the list is skipped only if every element
// was skipped.
func (e *evaluator) evalEach(res []any, pat map[string]any) outcome {
	applied, skip := false, passed
	global := false
	var msgs []string
	for i, el := range res {
		mark := e.pushIndex(i)
		o := e.eval(el, pat, scopeNone)
		e.pop(mark)
		switch o.status {
		case Pass:
			applied = true
		case Fail:
			return o
		default:
			if skip.status == Pass {
				skip = o
			}
			global = global || o.global
			if e.explain {
				msgs = append(msgs, o.msg)
			}
		}
	}
	if applied || skip.status == Pass {
		return passed
	}
	skip.global = global
	if e.explain {
		// Kyverno joins the reasons of the skipped elements.
		skip.path = string(e.path)
		skip.msg = strings.Join(msgs, "; ")
	}
	return skip
}

// containsAnchor reports whether a pattern has an anchored key at any depth.
func containsAnchor(pat any) bool {
	switch p := pat.(type) {
	case map[string]any:
		for k, v := range p {
			if a, _ := parseKey(k); a != anchorNone || containsAnchor(v) {
				return true
			}
		}
	case []any:
		for _, v := range p {
			if containsAnchor(v) {
				return true
			}
		}
	}
	return false
}

// goValue readies a resource value for a message as Kyverno prints it: its
// resources hold whole numbers as integers, so 1000000 prints as such, not
// as 1e+06.
func goValue(v any) any {
	switch t := v.(type) {
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1<<53 {
			return int64(t)
		}
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			out[k] = goValue(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = goValue(val)
		}
		return out
	}
	return v
}
