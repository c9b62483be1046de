package engine_test

import (
	"context"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// TestImagesOfAnInvalidReference: a container image that is not a valid
// reference makes Kyverno's images variable fail, so that every rule reading
// it is an error naming the image, while the rules that do not read it are
// evaluated as usual.
func TestImagesOfAnInvalidReference(t *testing.T) {
	const reads = `    preconditions: {all: [{key: "{{ images.containers.*.registry }}", operator: AnyNotIn, value: [ghcr.io]}]}
    validate: {message: m, pattern: {spec: {containers: [{name: "*"}]}}}`
	pod := func(image string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec:\n  containers:\n  - {name: c, image: \"" + image + "\"}\n"
	}
	tests := map[string]struct {
		rule, image string
		want        engine.RuleResult
	}{
		"an upper-case repository is an error where images is read": {
			rule: reads, image: "nginx/Web:1.0",
			want: engine.RuleResult{Result: engine.Error, Message: "failed to evaluate preconditions: failed to substitute variables in condition key: " +
				"failed to resolve images.containers.*.registry at path : invalid image 'nginx/Web:1.0' (bad image: docker.io/nginx/Web:1.0, " +
				"defaultRegistry: docker.io, enableDefaultRegistryMutation: true: repository name must be lowercase)"},
		},
		"a wildcard image is an error where images is read": {
			rule: reads, image: "*",
			want: engine.RuleResult{Result: engine.Error, Message: "failed to evaluate preconditions: failed to substitute variables in condition key: " +
				"failed to resolve images.containers.*.registry at path : invalid image '*' (bad image: docker.io/*, " +
				"defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format)"},
		},
		"an upper-case first part is a registry, so the reference is checked as given": {
			rule: `    validate: {message: m, pattern: {spec: {containers: [{image: "{{ images.containers.c.registry }}/*"}]}}}`, image: "Corp.example/app:1",
			want: engine.RuleResult{Result: engine.Pass, Message: "validation rule 'r' passed."},
		},
		"a pattern reading images names the image and the path": {
			rule: `    validate: {message: m, pattern: {spec: {containers: [{image: "{{ images.containers.c.registry }}/*"}]}}}`, image: "*",
			want: engine.RuleResult{Result: engine.Error, Message: "variable substitution failed: failed to resolve images.containers.c.registry at path /spec/containers/0/image: " +
				"invalid image '*' (bad image: docker.io/*, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format)"},
		},
		"a rule that does not read images is evaluated as usual": {
			rule: `    validate: {message: m, pattern: {spec: {containers: [{name: "?*"}]}}}`, image: "*",
			want: engine.RuleResult{Result: engine.Pass, Message: "validation rule 'r' passed."},
		},
		"an empty image is an invalid reference too (issue 40: Kyverno answers error, not skip)": {
			rule: reads, image: "",
			want: engine.RuleResult{Result: engine.Error, Message: "failed to evaluate preconditions: failed to substitute variables in condition key: " +
				"failed to resolve images.containers.*.registry at path : invalid image '' (bad image: docker.io/, " +
				"defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format)"},
		},
		"a valid image reads as before": {
			rule: reads, image: "ghcr.io/org/app:1",
			want: engine.RuleResult{Result: engine.Skip, Message: "preconditions not met"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, policy("", tc.rule))
			got := p.Evaluate(context.Background(), &engine.Request{Object: resource(t, pod(tc.image))})
			if len(got) != 1 {
				t.Fatalf("got %d results, want 1: %+v", len(got), got)
			}
			if got[0].Result != tc.want.Result || got[0].Message != tc.want.Message {
				t.Errorf("got %s %q\nwant %s %q", got[0].Result, got[0].Message, tc.want.Result, tc.want.Message)
			}
		})
	}
}

// Issue 56: Kyverno keys the images variable by container name and reads
// the name first: a container without one (an init container's included)
// fails the variable ("invalid key") for the rules that read it; the
// others are evaluated as usual.
func TestImagesOfAContainerWithoutName(t *testing.T) {
	const reads = `    preconditions: {all: [{key: "{{ images.containers.*.registry }}", operator: AnyNotIn, value: [ghcr.io]}]}
    validate: {message: m, pattern: {spec: {containers: [{image: "*"}]}}}`
	for name, tc := range map[string]struct {
		spec, rule string
		want       engine.RuleResult
	}{
		"a container without a name, where images is read": {
			spec: "  containers:\n  - {image: nginx:1}\n", rule: reads,
			want: engine.RuleResult{Result: engine.Error, Message: "failed to evaluate preconditions: failed to substitute variables in condition key: failed to resolve images.containers.*.registry at path : invalid key"},
		},
		"an init container without a name breaks images.containers too": {
			spec: "  initContainers:\n  - {image: busybox:1}\n  containers:\n  - {name: c, image: nginx:1}\n", rule: reads,
			want: engine.RuleResult{Result: engine.Error, Message: "failed to evaluate preconditions: failed to substitute variables in condition key: failed to resolve images.containers.*.registry at path : invalid key"},
		},
		"a rule that does not read images is evaluated as usual": {
			spec: "  containers:\n  - {image: nginx:1}\n", rule: `    validate: {message: m, pattern: {spec: {containers: [{image: "?*"}]}}}`,
			want: engine.RuleResult{Result: engine.Pass, Message: "validation rule 'r' passed."},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := compile(t, policy("", tc.rule))
			got := p.Evaluate(context.Background(), &engine.Request{Object: resource(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec:\n"+tc.spec)})
			if len(got) != 1 || got[0].Result != tc.want.Result || got[0].Message != tc.want.Message {
				t.Errorf("got %+v\nwant %s %q", got, tc.want.Result, tc.want.Message)
			}
		})
	}
}
