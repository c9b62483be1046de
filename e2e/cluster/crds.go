package cluster

import (
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// InstallCRDs installs (or updates) every CRD of tally's config/crd/bases and
// waits until they are established.
func InstallCRDs(cfg *rest.Config) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	return InstallCRDsFrom(cfg, filepath.Join(root, "config", "crd", "bases"))
}

// InstallCRDsFrom installs the CRDs of a folder and waits until they are
// served.
func InstallCRDsFrom(cfg *rest.Config, dir string) error {
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths:              []string{dir},
		ErrorIfPathMissing: true,
		MaxTime:            60 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("install CRDs from %s: %w", dir, err)
	}
	return nil
}
