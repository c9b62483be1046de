// Package fault holds test-only fault hooks. Production builds compile the
// hooks as no-ops (off.go); a build with the tag faultinject (the
// conformance suite's local provider builds the daemons so) compiles hooks
// that fail on demand (on.go), so that the suite can check that a fault in
// one evaluation leaves the processes serving.
package fault

// PanicAnnotation, on a resource, names the policy whose evaluation of that
// resource panics in a faultinject build.
const PanicAnnotation = "fault.tally.dev/panic-evaluating"

// annotation reads the PanicAnnotation of an object.
func annotation(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	v, _ := ann[PanicAnnotation].(string)
	return v
}
