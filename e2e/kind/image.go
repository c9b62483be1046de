package kind

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// binaries are the commands tally's image holds, at /usr/local/bin.
var binaries = []string{"tally-scanner", "tally-merger", "tally"}

// BuildImage builds tally's image from the repository at root without any
// base image: the three commands are compiled statically (CGO_ENABLED=0,
// linux/amd64 or the machine's architecture) and `docker import`ed as the
// image's only files, with the user (65532, the chart's runAsUser) and
// entrypoint the Dockerfile gives. So it needs a Docker engine but no
// registry; the Dockerfile, which starts FROM golang and distroless images,
// stays what users who can pull build with.
func BuildImage(ctx context.Context, root, image string) error {
	pkgs := make([]string, len(binaries))
	for i, b := range binaries {
		pkgs[i] = "./cmd/" + b
	}
	return BuildStaticImage(ctx, root, image, pkgs, "/usr/local/bin/tally")
}

// BuildStaticImage builds an image of no base holding the static binaries
// of the given packages (./path; each named after its last element) at
// /usr/local/bin, running entrypoint as user 65532: tally's, or a test's
// own (the conformance suite's image registry).
func BuildStaticImage(ctx context.Context, root, image string, pkgs []string, entrypoint string) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("building %s needs Docker: %w", image, err)
	}
	dir, err := os.MkdirTemp("", "tally-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	args := []string{"build", "-trimpath", "-ldflags", "-s -w -X github.com/tally-dev/tally/internal/version.Version=e2e", "-o", dir + "/"}
	args = append(args, pkgs...)
	var names []string
	for _, p := range pkgs {
		names = append(names, filepath.Base(p))
	}
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, tail(out, 4000))
	}

	var layer bytes.Buffer
	if err := writeLayer(&layer, dir, names); err != nil {
		return err
	}
	imp := exec.CommandContext(ctx, "docker", "import",
		"--change", "USER 65532:65532",
		"--change", `ENTRYPOINT ["`+entrypoint+`"]`,
		"-", image)
	imp.Stdin = &layer
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import %s: %w\n%s", image, err, tail(out, 4000))
	}
	return nil
}

// writeLayer writes the image's file system as a tar stream: /usr/local/bin
// with the binaries from dir, and an empty /tmp (the chart mounts one).
func writeLayer(w io.Writer, dir string, binaries []string) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: now}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: now}); err != nil {
		return err
	}
	for _, b := range binaries {
		data, err := os.ReadFile(filepath.Join(dir, b))
		if err != nil {
			return err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/" + b, Mode: 0o755, Size: int64(len(data)), ModTime: now}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}
