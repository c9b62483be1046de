package match

import "github.com/tally-dev/tally/engine/wildcard"

func hasWildcard(s string) bool { return wildcard.Has(s) }

func wildcardMatch(pattern, s string) bool { return wildcard.Match(pattern, s) }

func wildcardAny(patterns []string, s string) bool { return wildcard.Any(patterns, s) }
