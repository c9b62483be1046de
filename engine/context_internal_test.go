package engine

import (
	"slices"
	"testing"
)

func TestSplitPathReadsQuotedSegments(t *testing.T) {
	tests := map[string]struct {
		path string
		want []string
	}{
		"plain segments":                        {`request.object.metadata.name`, []string{"request", "object", "metadata", "name"}},
		"a quoted segment keeps its dots":       {`metadata.annotations."example.com/x"`, []string{"metadata", "annotations", "example.com/x"}},
		"a quoted segment in the middle":        {`a."b.c".d`, []string{"a", "b.c", "d"}},
		"a JSON escape in a quoted segment":     {`a."x\"y.z"`, []string{"a", `x"y.z`}},
		"a quote inside a plain segment":        {`a.b"c`, []string{"a", `b"c`}},
		"an unterminated quote runs to the end": {`a."b.c`, []string{"a", `"b.c`}},
		"a trailing backslash":                  {`a."b\`, []string{"a", `"b\`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := splitPath(tc.path); !slices.Equal(got, tc.want) {
				t.Errorf("splitPath(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}
