package match

import (
	"strings"
	"unicode/utf8"
)

// hasWildcard reports whether s holds a wildcard character.
func hasWildcard(s string) bool {
	return strings.ContainsAny(s, "*?")
}

// wildcardMatch reports whether s matches pattern, where `*` matches any
// sequence of characters (the empty one included) and `?` exactly one
// character. Every other character matches itself. It does not allocate.
func wildcardMatch(pattern, s string) bool {
	// Greedy matching that backtracks to the last `*` only: linear in practice
	// and never exponential.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				star, mark = p, i
				p++
				continue
			case '?':
				_, n := utf8.DecodeRuneInString(s[i:])
				p, i = p+1, i+n
				continue
			default:
				if c == s[i] {
					p, i = p+1, i+1
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		// Let the last `*` swallow one more character and retry.
		_, n := utf8.DecodeRuneInString(s[mark:])
		mark += n
		p, i = star+1, mark
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// wildcardAny reports whether s matches one of patterns.
func wildcardAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if wildcardMatch(p, s) {
			return true
		}
	}
	return false
}
