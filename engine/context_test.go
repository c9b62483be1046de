package engine_test

import (
	"context"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// values serves the same values to every policy and rule (a values file's
// globalValues).
type values map[string]any

func (v values) PolicyValues(string) map[string]any            { return v }
func (v values) RuleValues(string, string) map[string]any      { return nil }
func (v values) ForeachValues(string, string) map[string][]any { return nil }

// TestValuesWithQuotedSegments: a values file's key may quote a segment as
// JMESPath does (annotations."example.com/x"), and a default (|| ”) reads
// an annotation that is missing, as Kyverno's.
func TestValuesWithQuotedSegments(t *testing.T) {
	const rule = `    preconditions: {all: [{key: "{{ request.object.metadata.annotations.\"example.com/x\" || '' }}", operator: NotEquals, value: ""}]}
    validate:
      message: "x is {{ request.object.metadata.annotations.\"example.com/x\" || 'unset' }}"
      deny: {conditions: {any: [{key: "{{ request.object.metadata.annotations.\"example.com/x\" || '' }}", operator: Equals, value: "on"}]}}`
	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns, annotations: {other: y}}\nspec: {containers: [{name: c, image: nginx}]}\n"
	tests := map[string]struct {
		values values
		want   engine.RuleResult
	}{
		"a missing annotation reads as the default": {
			want: engine.RuleResult{Result: engine.Skip, Message: "preconditions not met"},
		},
		"a value for a quoted key is applied to the annotation": {
			values: values{`request.object.metadata.annotations."example.com/x"`: "on"},
			want:   engine.RuleResult{Result: engine.Fail, Message: "x is on"},
		},
		"a quoted key may hold a JSON escape": {
			values: values{`request.object.metadata.annotations."example.com/x"`: "off", `request.object.metadata.annotations."a\"b"`: "z"},
			want:   engine.RuleResult{Result: engine.Pass, Message: "validation rule 'r' passed."},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := &engine.Request{Object: resource(t, pod)}
			if tc.values != nil {
				req.Values = tc.values
			}
			got := compile(t, policy("", rule)).Evaluate(context.Background(), req)
			if len(got) != 1 {
				t.Fatalf("got %d results, want 1: %+v", len(got), got)
			}
			if got[0].Result != tc.want.Result || got[0].Message != tc.want.Message {
				t.Errorf("got %s %q\nwant %s %q", got[0].Result, got[0].Message, tc.want.Result, tc.want.Message)
			}
		})
	}
}
