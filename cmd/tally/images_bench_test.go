package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

// BenchmarkApplyDistinctImages: tally apply verifying 100 distinct signed
// images (4 registry requests each) against a registry of the bench's
// own, at the CLI's default --registry-qps and at the scanner's 20 a
// second (issue 54: the CLI was held to 20/s, 18.1 s for 100 images).
//
//	go test ./cmd/tally -run '^$' -bench BenchmarkApplyDistinctImages -benchtime 3x
func BenchmarkApplyDistinctImages(b *testing.B) {
	reg, err := sigtest.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Stop()
	key, err := sigtest.NewKey()
	if err != nil {
		b.Fatal(err)
	}
	var pods strings.Builder
	for i := range 100 {
		d, err := reg.Push(fmt.Sprintf("team/app%03d", i), "v1")
		if err != nil {
			b.Fatal(err)
		}
		if err := key.Sign(d, nil); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(&pods, "apiVersion: v1\nkind: Pod\nmetadata: {name: p%03d, namespace: default}\nspec: {containers: [{name: app, image: %q}]}\n---\n", i, reg.Host+fmt.Sprintf("/team/app%03d:v1", i))
	}
	dir := b.TempDir()
	writeTree(b, dir, map[string]string{"policy.yaml": key.Policy("signed", reg.Host+"/*"), "pods.yaml": pods.String()})
	for _, qps := range []string{"300", "20"} {
		b.Run("registry-qps="+qps, func(b *testing.B) {
			for b.Loop() {
				var out, errOut bytes.Buffer
				args := []string{"apply", filepath.Join(dir, "policy.yaml"), "-r", filepath.Join(dir, "pods.yaml"), "--registry-qps", qps}
				if code := runIO(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 || !strings.Contains(out.String(), "pass: 100") {
					b.Fatalf("exit %d: %s %s", code, out.String(), errOut.String())
				}
			}
		})
	}
}
