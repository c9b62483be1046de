package tester

import "fmt"

// Status is the outcome of one expectation, and, rolled up with Merge, of a
// test file and of a whole run.
//
// Statuses are ordered by severity: how much a result asks its reader to
// act. The order is the contract Merge and the callers' comparisons rely on:
//
//	Passed < Skipped < Unsupported < Failed < Errored
//
// From the least severe:
//   - Passed: tally gave the expected result (a policy or rule that does not
//     apply counts as a pass, as in kyverno test).
//   - Skipped: the expectation was not checked, and that does not fail the
//     run: its policy was refused (reported apart) or it names a rule the
//     policy lacks. Above Passed: a file with a skip is not wholly green.
//   - Unsupported: the expectation checks what tally does not evaluate
//     (mutate and generate results); never a pass, it fails the run.
//   - Failed: tally's result differs from the expected one.
//   - Errored: the test could not run as written (a file could not be read,
//     a policy was refused). Only files and runs are Errored; the
//     expectations of such a test are Failed or Skipped, as kyverno test
//     prints them.
//
// The zero value is Passed, the identity of Merge: nothing merged is a pass,
// as an empty run is (--require-tests is the caller's business).
type Status int

// The statuses, in order of severity.
const (
	Passed Status = iota
	Skipped
	Unsupported
	Failed
	Errored
)

// Merge rolls two statuses up into the more severe one.
func (s Status) Merge(other Status) Status { return max(s, other) }

// statusNames are the statuses as JSON and YAML output spell them.
var statusNames = [...]string{Passed: "pass", Skipped: "skip", Unsupported: "unsupported", Failed: "fail", Errored: "error"}

func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return fmt.Sprintf("Status(%d)", int(s))
	}
	return statusNames[s]
}

// MarshalText spells a status as the reports always have: "pass", "fail", ...
func (s Status) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(statusNames) {
		return nil, fmt.Errorf("marshal status: unknown status %d", int(s))
	}
	return []byte(statusNames[s]), nil
}

// UnmarshalText reads what MarshalText writes.
func (s *Status) UnmarshalText(text []byte) error {
	for i, name := range statusNames {
		if name == string(text) {
			*s = Status(i)
			return nil
		}
	}
	return fmt.Errorf("unmarshal status: unknown status %q", text)
}

// word is a status as kyverno test prints it in its table.
func (s Status) word() string {
	switch s {
	case Passed:
		return "Pass"
	case Skipped:
		return "Skip"
	case Unsupported:
		return "Unsupported"
	case Failed:
		return "Fail"
	}
	return "Error"
}
