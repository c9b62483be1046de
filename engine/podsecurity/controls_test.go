package podsecurity

import (
	"slices"
	"testing"

	"k8s.io/pod-security-admission/policy"
)

// TestEveryCheckHasAControlAndAFieldList fails when a new version of
// k8s.io/pod-security-admission brings a check tally does not know yet:
// exclusions could not name it and its failures would list no field.
func TestEveryCheckHasAControlAndAFieldList(t *testing.T) {
	for _, chk := range policy.DefaultChecks() {
		t.Run(string(chk.ID), func(t *testing.T) {
			if ControlOf(string(chk.ID)) == "" {
				t.Error("no control names the check")
			}
			for _, vc := range chk.Versions {
				if enumeratorFor(chk.ID, vc.MinimumVersion) == nil {
					t.Errorf("no field list for its %s revision", vc.MinimumVersion)
				}
			}
		})
	}
}

func TestControlNames(t *testing.T) {
	got := Controls()
	if len(got) != len(controls) || !slices.IsSorted(got) || !slices.Contains(got, "Host Probes / Lifecycle Hooks") {
		t.Errorf("Controls() = %v", got)
	}
	for _, c := range controls {
		for _, id := range c.checks {
			if ControlOf(string(id)) != c.name {
				t.Errorf("ControlOf(%s) = %q, want %q", id, ControlOf(string(id)), c.name)
			}
		}
	}
}
