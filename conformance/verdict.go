package conformance

import (
	"fmt"
	"strings"
)

// CaseResult is the outcome of one case.
type CaseResult struct {
	Name    string
	Rules   []string
	Skipped bool
	// Extension: a tally extension case that failed on another
	// implementation (not counted as a failure).
	Extension bool
	Err       error
}

// Verdict renders the per-rule table: a rule passes when every case naming
// it passed, fails when one failed, and is skipped when all its cases were
// skipped (or it has none).
func Verdict(results []CaseResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-4s  %-7s  %s\n", "rule", "verdict", "cases")
	failed := 0
	for _, r := range Rules {
		var names []string
		state := ""
		for _, c := range results {
			if !contains(c.Rules, r.ID) {
				continue
			}
			mark := "ok"
			switch {
			case c.Extension:
				mark = "extension"
			case c.Err != nil:
				mark, state = "FAIL", "FAIL"
			case c.Skipped:
				mark = "skipped"
			default:
				if state == "" {
					state = "pass"
				}
			}
			names = append(names, c.Name+" ("+mark+")")
		}
		if state == "" {
			state = "skip"
		}
		if state == "FAIL" {
			failed++
		}
		if len(names) == 0 {
			names = []string{"(no case run)"}
		}
		fmt.Fprintf(&b, "%-4s  %-7s  %s\n", r.ID, state, strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, "%d of %d rules failed\n", failed, len(Rules))
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
