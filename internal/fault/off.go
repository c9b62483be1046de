//go:build !faultinject

package fault

// Enabled says whether the hooks are compiled in.
const Enabled = false

// Evaluating does nothing outside faultinject builds.
func Evaluating(string, map[string]any) {}
