package tester

import (
	"encoding/json"
	"testing"
)

// The statuses are ordered by severity, and Merge keeps the more severe:
// a run rolls up to its worst outcome.
func TestStatusMerge(t *testing.T) {
	order := []Status{Passed, Skipped, Unsupported, Failed, Errored}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Errorf("%s is not below %s", order[i-1], order[i])
		}
	}
	tests := map[string]struct{ a, b, want Status }{
		"the zero value is a pass":                    {want: Passed},
		"a skip outweighs a pass":                     {a: Passed, b: Skipped, want: Skipped},
		"an unsupported expectation outweighs a skip": {a: Unsupported, b: Skipped, want: Unsupported},
		"a failure outweighs unsupported":             {a: Unsupported, b: Failed, want: Failed},
		"an error outweighs a failure":                {a: Errored, b: Failed, want: Errored},
		"a pass does not lower an error":              {a: Errored, b: Passed, want: Errored},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.a.Merge(tc.b); got != tc.want {
				t.Errorf("%s.Merge(%s) = %s, want %s", tc.a, tc.b, got, tc.want)
			}
			if got := tc.b.Merge(tc.a); got != tc.want {
				t.Errorf("%s.Merge(%s) = %s, want %s", tc.b, tc.a, got, tc.want)
			}
		})
	}
}

// A status is spelled in JSON (and YAML) as the reports always spelled it,
// and reads back.
func TestStatusText(t *testing.T) {
	for s, want := range map[Status]string{Passed: `"pass"`, Skipped: `"skip"`, Unsupported: `"unsupported"`, Failed: `"fail"`, Errored: `"error"`} {
		data, err := json.Marshal(s)
		if err != nil || string(data) != want {
			t.Errorf("%d marshals to %s (%v), want %s", int(s), data, err, want)
		}
		var back Status
		if err := json.Unmarshal(data, &back); err != nil || back != s {
			t.Errorf("%s reads back as %s (%v)", data, back, err)
		}
	}
	if _, err := json.Marshal(Status(42)); err == nil {
		t.Error("an unknown status marshals")
	}
	var s Status
	if err := json.Unmarshal([]byte(`"passed"`), &s); err == nil {
		t.Error(`"passed" reads as a status`)
	}
}
