package kind

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
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

	files := make([]ImageFile, len(names))
	for i, n := range names {
		files[i] = ImageFile{Path: "/usr/local/bin/" + n, Source: filepath.Join(dir, n)}
	}
	return ImportImage(ctx, image, files, "65532:65532", "", []string{entrypoint})
}

// ImageFile is a file (or, Source being a folder, a tree) an imported
// image holds at Path.
type ImageFile struct{ Path, Source string }

// imageLabel marks the images ImportImage makes: hack/kind/docker.sh down
// removes those a later import left dangling (each run imports its own).
const imageLabel = "dev.tally.e2e-image=true"

// ImportImage `docker import`s an image of no base holding files (and an
// empty /tmp), run as user ("" for root) in workdir ("" for /) with
// entrypoint: tally's own images, and the third-party ones the kind runs
// add (reports-server, policy-reporter, etcd, PostgreSQL), built from
// binaries on this machine because no registry can be reached.
func ImportImage(ctx context.Context, image string, files []ImageFile, user, workdir string, entrypoint []string) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("building %s needs Docker: %w", image, err)
	}
	var layer bytes.Buffer
	if err := writeLayer(&layer, files); err != nil {
		return fmt.Errorf("image %s: %w", image, err)
	}
	ep, err := json.Marshal(entrypoint)
	if err != nil {
		return err
	}
	args := []string{"import", "--change", "ENTRYPOINT " + string(ep), "--change", "LABEL " + imageLabel}
	if user != "" {
		args = append(args, "--change", "USER "+user)
	}
	if workdir != "" {
		args = append(args, "--change", "WORKDIR "+workdir)
	}
	imp := exec.CommandContext(ctx, "docker", append(args, "-", image)...)
	imp.Stdin = &layer
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import %s: %w\n%s", image, err, tail(out, 4000))
	}
	return nil
}

// writeLayer writes the image's file system as a tar stream: an empty /tmp
// (the charts mount one) and the files, with their parent folders; a
// Source folder is copied whole, symbolic links kept.
func writeLayer(w io.Writer, files []ImageFile) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	dirs := map[string]bool{}
	mkdir := func(name string, mode int64) error {
		if dirs[name] {
			return nil
		}
		dirs[name] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: now})
	}
	parents := func(name string) error {
		parts := strings.Split(name, "/")
		for i := 1; i < len(parts); i++ {
			if err := mkdir(strings.Join(parts[:i], "/"), 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	if err := mkdir("tmp", 0o1777); err != nil {
		return err
	}
	for _, f := range files {
		root := strings.TrimPrefix(path.Clean(f.Path), "/")
		if err := parents(root); err != nil {
			return err
		}
		err := filepath.WalkDir(f.Source, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(f.Source, p)
			if err != nil {
				return err
			}
			name := path.Join(root, filepath.ToSlash(rel))
			info, err := d.Info()
			if err != nil {
				return err
			}
			switch {
			case d.IsDir():
				return mkdir(name, 0o755)
			case info.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: now})
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			mode := int64(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: now}); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
