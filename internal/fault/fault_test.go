package fault

import "testing"

func TestEvaluatingPanicsOnlyInFaultinjectBuilds(t *testing.T) {
	obj := map[string]any{"metadata": map[string]any{"annotations": map[string]any{PanicAnnotation: "p"}}}
	panicked := func(policy string) (p bool) {
		defer func() { p = recover() != nil }()
		Evaluating(policy, obj)
		return false
	}
	if got := panicked("p"); got != Enabled {
		t.Errorf("evaluating the named policy: panicked %v, want %v (Enabled)", got, Enabled)
	}
	if panicked("other") {
		t.Error("a policy the annotation does not name panicked")
	}
}
