package pattern

import (
	"fmt"
	"strings"
)

// anchor is the kind of anchor a pattern key carries.
type anchor uint8

const (
	anchorNone        anchor = iota
	anchorCondition          // (key): if it holds, its siblings apply; else skip
	anchorEquality           // =(key): if the key is present, it must match
	anchorNegation           // X(key): the key must be absent
	anchorExistence          // ^(key): some list element matches each pattern element
	anchorGlobal             // <(key): if it does not hold, the whole rule is skipped
	anchorAddIfAbsent        // +(key): mutate only; ignored by validation
)

// parseKey splits a pattern key into its anchor and the plain key. An anchor
// is an optional modifier (one of "=X^<+"), then the key in parentheses; the
// key must not be empty. Anything else is a plain key.
func parseKey(k string) (anchor, string) {
	n := len(k)
	if n < 3 || k[n-1] != ')' {
		return anchorNone, k
	}
	if k[0] == '(' {
		return anchorCondition, k[1 : n-1]
	}
	if n < 4 || k[1] != '(' {
		return anchorNone, k
	}
	name := k[2 : n-1]
	switch k[0] {
	case '=':
		return anchorEquality, name
	case 'X':
		return anchorNegation, name
	case '^':
		return anchorExistence, name
	case '<':
		return anchorGlobal, name
	case '+':
		return anchorAddIfAbsent, name
	}
	return anchorNone, k
}

func (a anchor) String() string {
	switch a {
	case anchorCondition:
		return "conditional"
	case anchorEquality:
		return "equality"
	case anchorNegation:
		return "negation"
	case anchorExistence:
		return "existence"
	case anchorGlobal:
		return "global"
	case anchorAddIfAbsent:
		return "add-if-not-present"
	}
	return "none"
}

// CheckKey reports why a pattern key that looks like an anchor (it starts
// with "(" or with one of "=X^<+" then "(", or it is one character, "("
// and a key ending in ")") is not a well-formed one: such a key would otherwise be taken as a
// literal field name, which is never what its author meant. A plain key
// and a well-formed anchor give nil.
func CheckKey(k string) error {
	if a, _ := parseKey(k); a != anchorNone {
		return nil
	}
	opens := strings.HasPrefix(k, "(") || (len(k) >= 2 && k[1] == '(' && strings.ContainsRune("=X^<+", rune(k[0])))
	closes := len(k) >= 3 && k[1] == '(' && strings.HasSuffix(k, ")")
	switch {
	case opens && !strings.HasSuffix(k, ")"):
		return fmt.Errorf("malformed anchor %q: no closing parenthesis", k)
	case opens:
		return fmt.Errorf("malformed anchor %q: the key in parentheses is empty", k)
	case closes:
		return fmt.Errorf("malformed anchor %q: unknown modifier (want one of ( =( X( ^( <( +()", k)
	}
	return nil
}

// Anchor is the kind of anchor of an overlay key, for the mutate engine.
type Anchor = anchor

// The anchors of a mutate overlay's keys.
const (
	AnchorNone        = anchorNone
	AnchorCondition   = anchorCondition
	AnchorGlobal      = anchorGlobal
	AnchorAddIfAbsent = anchorAddIfAbsent
)

// ParseKey splits a key into its anchor and the plain key.
func ParseKey(k string) (Anchor, string) { return parseKey(k) }
