package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Assets returns the folder holding kube-apiserver, etcd and
// kube-controller-manager: TALLY_CONTROLPLANE_ASSETS if set, else the
// output of hack/controlplane/build.sh (instant when the cache is warm; a cold
// build takes about 12 minutes on two cores).
func Assets(ctx context.Context) (string, error) {
	if dir := os.Getenv(EnvAssets); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "hack", "controlplane", "build.sh")
	fmt.Fprintf(os.Stderr, "cluster: %s is not set; building or reusing the control plane with %s\n", EnvAssets, script)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build control plane (%s): %w", script, err)
	}
	return strings.TrimSpace(out.String()), nil
}

// RepoRoot is the folder of tally's go.mod, found from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/tally-dev/tally\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("tally's go.mod not found above the working directory")
		}
		dir = parent
	}
}
