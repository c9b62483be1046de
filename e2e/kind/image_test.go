package kind

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/e2e/cluster"
)

// hack/kind/docker.sh removes the dangling images of earlier runs by the
// label ImportImage gives them: the two must name the same label, or the
// images pile up again without a word.
func TestDockerShRemovesImportedImagesByTheirLabel(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack/kind/docker.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "e2e_image_label=" + imageLabel + "\n"; !strings.Contains(string(script), want) {
		t.Errorf("hack/kind/docker.sh does not set %q: it prunes images by another label than ImportImage's", strings.TrimSpace(want))
	}
}
