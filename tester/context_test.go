package tester

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A test's context file and clusterResources are what its policies read
// of the cluster: a ValidatingPolicy's resource.Get and image.GetMetadata
// and a classic apiCall entry read them, and what they lack is an error
// naming it.
func TestContextFileAndClusterResources(t *testing.T) {
	file := filepath.Join("testdata", "context", TestFileName)
	l := runAndLoad(t, file, 8)
	want := map[string]string{
		"team-from-namespace": `namespaces "lost" not found`,
		"approved-secrets":    `failed to GET resource with raw url: /api/v1/namespaces/lost/secrets/db: secrets "db" not found`,
	}
	for _, r := range l.resources {
		if r.name == "wrong-team" {
			got := l.evaluate(context.Background(), l.policies[2], r, "")
			if len(got) != 1 || !strings.Contains(got[0].Message, "image data for busybox not found in the context") {
				t.Errorf("image-not-root on wrong-team: got %+v", got)
			}
		}
		if r.name != "stray" {
			continue
		}
		for _, p := range l.policies[:2] {
			got := l.evaluate(context.Background(), p, r, "")
			if len(got) != 1 || !strings.Contains(got[0].Message, want[p.Name]) {
				t.Errorf("%s on stray: got %+v, want an error containing %q", p.Name, got, want[p.Name])
			}
		}
	}
}
