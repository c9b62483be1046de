// Package version is the version of tally's binaries: the release stamped
// at build time (make build, the Dockerfile), else what the Go toolchain
// recorded (the module version of `go install`, or the VCS revision of a
// build in a checkout).
package version

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Version is stamped at build time:
//
//	go build -ldflags "-X github.com/tally-dev/tally/internal/version.Version=0.1.0" ./cmd/...
//
// Empty when not stamped.
var Version string

// String is the version to print: Version when stamped, else the module
// version from the build info, else the VCS revision (12 characters, with
// "-dirty" when the tree had changes), else "(devel)".
//
// `go run` records no VCS information: its binary asks git about the source
// tree it was built from instead, which is the tree as it is now.
func String() string {
	info, _ := debug.ReadBuildInfo()
	v := resolve(Version, info)
	if v == "(devel)" && builtByGoRun() {
		if rev := sourceRevision(); rev != "" {
			return "devel+" + rev
		}
	}
	return v
}

// builtByGoRun reports whether this binary is one `go run` built: it lives
// in the go command's temporary work directory.
func builtByGoRun() bool {
	exe, err := os.Executable()
	return err == nil && strings.Contains(filepath.ToSlash(exe), "/go-build")
}

// sourceRevision is the git revision of the source tree this file was
// compiled from (12 characters, "-dirty" when the tree has changes), or ""
// when it cannot be told (no git, a trimmed path, a tree that is gone).
func sourceRevision() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Dir(file)
	// No caller's context to use: `version` is a leaf of every binary. Two
	// seconds bound a git that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	out := strings.TrimSpace(string(rev))
	status, err := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain").Output()
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		out += "-dirty"
	}
	return out
}

// resolve is String on given inputs.
func resolve(stamped string, info *debug.BuildInfo) string {
	if stamped != "" {
		return stamped
	}
	if info == nil {
		return "(devel)"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision == "" {
		return "(devel)"
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified {
		revision += "-dirty"
	}
	return "devel+" + revision
}
