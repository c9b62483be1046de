// Package wildcard matches Kyverno's wildcards: `*` matches any sequence of
// characters (the empty one included) and `?` exactly one character; every
// other character matches itself.
package wildcard

import (
	"strings"
	"unicode/utf8"
)

// Has reports whether s contains a wildcard character.
func Has(s string) bool {
	return indexWildcard(s) >= 0
}

// indexWildcard returns the index of the first '*' or '?' in s, or -1.
func indexWildcard(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '*' || s[i] == '?' {
			return i
		}
	}
	return -1
}

// lastIndexWildcard returns the index of the last '*' or '?' in s, or -1.
func lastIndexWildcard(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '*' || s[i] == '?' {
			return i
		}
	}
	return -1
}

// Match reports whether s matches pattern, where '*' matches any
// sequence of characters (including none) and '?' matches exactly one
// character. Every other character matches itself.
//
// It runs in O(len(pattern)*len(s)) worst case without recursion: on a
// mismatch it backtracks only to the most recent '*', which is enough because
// an earlier '*' can never help once a later one has matched.
func Match(pattern, s string) bool {
	first := indexWildcard(pattern)
	if first < 0 {
		return pattern == s
	}
	// The literal text before the first wildcard and after the last one
	// must be the ends of s: checking them first settles most mismatches
	// without backtracking.
	last := lastIndexWildcard(pattern)
	prefix, suffix := pattern[:first], pattern[last+1:]
	if len(s) < len(prefix)+len(suffix) || !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, suffix) {
		return false
	}
	pattern, s = pattern[first:last+1], s[len(prefix):len(s)-len(suffix)]
	p, i := 0, 0
	star, mark := -1, 0 // position after the last '*' in pattern, and in s
	for i < len(s) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				p++
				star, mark = p, i
				continue
			case '?':
				_, n := utf8.DecodeRuneInString(s[i:])
				p++
				i += n
				continue
			default:
				if c == s[i] {
					p++
					i++
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		// Let the last '*' swallow one more character and retry from there.
		_, n := utf8.DecodeRuneInString(s[mark:])
		mark += n
		p, i = star, mark
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Any reports whether s matches one of patterns.
func Any(patterns []string, s string) bool {
	for _, p := range patterns {
		if Match(p, s) {
			return true
		}
	}
	return false
}
