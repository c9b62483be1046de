//go:build faultinject

package fault

// Enabled says whether the hooks are compiled in.
const Enabled = true

// Evaluating is called before a policy evaluates a resource; it panics
// when the resource's PanicAnnotation names the policy.
func Evaluating(policy string, obj map[string]any) {
	if policy != "" && annotation(obj) == policy {
		panic("fault injected: evaluation of " + policy + " panics")
	}
}
