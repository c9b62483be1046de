package engine

import (
	"fmt"

	"github.com/tally-dev/tally/engine/pattern"
)

// The anchors of a patchStrategicMerge overlay, resolved against the object
// before the merge (Kyverno's mutate documentation):
//
//   - +(key): add the key only when the object lacks it;
//   - (key): a condition: the sibling fields apply only when the object's
//     key matches the value (as a validate pattern). In a map, a condition
//     that does not hold leaves the whole overlay out; in a list of maps,
//     the element applies to each object element for which it holds (the
//     element is then named after that object element, so that the merge
//     finds it);
//   - <(key): a global condition: when it holds for no element, the whole
//     overlay is left out.
//
// Resolved, an overlay has no anchors left: conditions are removed, and
// elements that were only conditions with them.

// anchorMiss is a condition (or a global condition) that does not hold.
type anchorMiss struct {
	global bool
	msg    string
}

func (a *anchorMiss) Error() string {
	if a.global {
		return "global condition failed: " + a.msg
	}
	return "condition failed: " + a.msg
}

// prepareOverlay resolves an overlay's anchors against obj. The overlay is
// copied, never changed. An *anchorMiss error says the overlay does not
// apply.
func prepareOverlay(overlay any, obj any) (any, error) {
	o := deepCopyJSON(overlay)
	o, err := resolve(o, obj)
	if err != nil {
		return nil, err
	}
	if m, ok := o.(map[string]any); ok {
		dropAnchored(m, false)
	}
	return o, nil
}

func isCondition(a pattern.Anchor) bool {
	return a == pattern.AnchorCondition || a == pattern.AnchorGlobal
}

// resolve walks the overlay beside the object.
func resolve(o, obj any) (any, error) {
	switch t := o.(type) {
	case map[string]any:
		return t, resolveMap(t, obj)
	case []any:
		return resolveList(t, obj)
	}
	return o, nil
}

func resolveMap(o map[string]any, obj any) error {
	objMap, _ := obj.(map[string]any)
	addIfAbsent(o, objMap)
	if err := overlayConditions(o, objMap, pattern.AnchorGlobal); err != nil {
		return &anchorMiss{global: true, msg: err.Error()}
	}
	if err := overlayConditions(o, objMap, pattern.AnchorCondition); err != nil {
		return &anchorMiss{msg: err.Error()}
	}
	for k, v := range o {
		if a, _ := pattern.ParseKey(k); isCondition(a) || a == pattern.AnchorAddIfAbsent {
			continue
		}
		var objValue any
		if objMap != nil {
			objValue = objMap[k]
		}
		nv, err := resolve(v, objValue)
		if err != nil {
			return err
		}
		o[k] = nv
	}
	return nil
}

// addIfAbsent drops the +(key) fields the object has, and makes the others
// plain fields. It returns how many there were.
func addIfAbsent(o map[string]any, obj map[string]any) int {
	n := 0
	for k, v := range o {
		a, key := pattern.ParseKey(k)
		if a != pattern.AnchorAddIfAbsent {
			continue
		}
		n++
		delete(o, k)
		if _, has := obj[key]; !has {
			o[key] = v
		}
	}
	return n
}

// overlayConditions checks the overlay's anchors of one kind against the
// object: the key must be there, and its value match the anchor's value
// as a validate pattern (an anchor whose value adds fields if absent is
// no condition).
func overlayConditions(o map[string]any, obj map[string]any, kind pattern.Anchor) error {
	for k, v := range o {
		a, key := pattern.ParseKey(k)
		if a != kind {
			continue
		}
		objValue, has := obj[key]
		if !has {
			return fmt.Errorf("could not found %q key in the resource", key)
		}
		if vm, ok := v.(map[string]any); ok {
			om, _ := objValue.(map[string]any)
			if addIfAbsent(vm, om) > 0 {
				continue
			}
		}
		if res := pattern.Validate(objValue, v); res.Status != pattern.Pass {
			return fmt.Errorf("%s", res.Message)
		}
	}
	return nil
}

// resolveList expands the elements of a list of maps that hold anchors:
// each becomes one element per object element it holds for, named after
// it. The anchored elements themselves are removed later (dropAnchored).
func resolveList(o []any, obj any) ([]any, error) {
	if len(o) == 0 {
		return o, nil
	}
	if _, ok := o[0].(map[string]any); !ok {
		return o, nil
	}
	objList, _ := obj.([]any)
	out := o
	for _, el := range o {
		if !hasAnchors(el, true) {
			continue
		}
		global := hasGlobalAnchors(el)
		globalPassed := false
		var lastGlobal error
		for _, objEl := range objList {
			c, err := resolve(deepCopyJSON(el), objEl)
			if err != nil {
				var miss *anchorMiss
				if !asMiss(err, &miss) {
					return nil, err
				}
				if miss.global {
					lastGlobal = err
				}
				continue
			}
			if global {
				globalPassed = true
				continue
			}
			name, _ := objEl.(map[string]any)["name"]
			if name == nil || name == "" {
				continue // an element without a name cannot be merged into
			}
			if dropAnchored(c, true) {
				continue
			}
			if m, ok := c.(map[string]any); ok {
				m["name"] = name
				out = append(out, m)
			}
		}
		if obj == nil {
			if _, err := resolve(deepCopyJSON(el), nil); err == nil && global {
				globalPassed = true
			}
		}
		if !globalPassed && lastGlobal != nil {
			return nil, lastGlobal
		}
	}
	return out, nil
}

func asMiss(err error, miss **anchorMiss) bool {
	m, ok := err.(*anchorMiss)
	if ok {
		*miss = m
	}
	return ok
}

// hasAnchors says whether a value holds a conditional, global or (with
// addToo) add-if-absent anchor, at any depth.
func hasAnchors(v any, addToo bool) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			a, _ := pattern.ParseKey(k)
			if isCondition(a) || (addToo && a == pattern.AnchorAddIfAbsent) || hasAnchors(e, addToo) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if hasAnchors(e, addToo) {
				return true
			}
		}
	case string:
		a, _ := pattern.ParseKey(t)
		return isCondition(a)
	}
	return false
}

func hasGlobalAnchors(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if a, _ := pattern.ParseKey(k); a == pattern.AnchorGlobal || hasGlobalAnchors(e) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if hasGlobalAnchors(e) {
				return true
			}
		}
	}
	return false
}

// dropAnchored removes what was only a condition from a resolved overlay
// value and says whether nothing of it is left to patch (a map left empty,
// a list whose elements all went; a scalar when dropScalar). Maps are
// changed in place; a list's kept elements are written back by the caller
// through pruneList.
func dropAnchored(v any, dropScalar bool) bool {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		// Conditions first: one with nothing under it but conditions goes,
		// one that carries fields becomes a plain field.
		for _, k := range keys {
			a, key := pattern.ParseKey(k)
			if !isCondition(a) {
				continue
			}
			e := t[k]
			delete(t, k)
			if !dropAnchored(e, true) {
				t[key] = pruned(e)
			}
		}
		empty := true
		for k, e := range t {
			if dropAnchored(e, false) {
				delete(t, k)
				continue
			}
			t[k] = pruned(e)
			empty = false
		}
		return empty
	case []any:
		return len(t) > 0 && len(pruneList(t)) == 0
	}
	return dropScalar
}

// pruned is a value with its list elements pruned (pruneList).
func pruned(v any) any {
	if l, ok := v.([]any); ok {
		return pruneList(l)
	}
	return v
}

// pruneList is a list without the elements that hold anchors (templates
// resolveList expanded) and those left empty.
func pruneList(l []any) []any {
	kept := make([]any, 0, len(l))
	for _, e := range l {
		if hasAnchors(e, true) || dropAnchored(e, false) {
			continue
		}
		kept = append(kept, e)
	}
	return kept
}

func deepCopyJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopyJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopyJSON(e)
		}
		return out
	}
	return v
}
