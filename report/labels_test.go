package report

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParseGVRLabel(t *testing.T) {
	tests := map[string]struct {
		in   string
		want schema.GroupVersionResource
		ok   bool
	}{
		"a core resource":          {"v1.pods", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, true},
		"a grouped resource":       {"apps.v1.deployments", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
		"a group with dots":        {"networking.k8s.io.v1.ingresses", schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}, true},
		"empty":                    {"", schema.GroupVersionResource{}, false},
		"no version":               {"pods", schema.GroupVersionResource{}, false},
		"a trailing dot":           {"v1.", schema.GroupVersionResource{}, false},
		"an empty group component": {".v1.pods", schema.GroupVersionResource{}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ParseGVRLabel(tc.in)
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseGVRLabel(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
			if ok && GVRLabel(got) != tc.in {
				t.Errorf("GVRLabel(%v) = %q, want %q back", got, GVRLabel(got), tc.in)
			}
		})
	}
}
