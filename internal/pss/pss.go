// Package pss reads the Pod Security Standards policies of the corpus
// (policy-library/pod-security, and their CEL twins pod-security-cel and
// pod-security-vpol, test folders left out): the policy sets of tally's
// benchmarks and bench commands.
package pss

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
)

// Read returns every ClusterPolicy and ValidatingPolicy under dir as a JSON
// object; none found is an error naming dir.
func Read(dir string) ([]map[string]any, error) {
	var out []map[string]any
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || strings.Contains(path, ".kyverno-test") || strings.Contains(path, ".chainsaw-test") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var obj map[string]any
		if yaml.Unmarshal(data, &obj) != nil || (obj["kind"] != "ClusterPolicy" && obj["kind"] != policiesv1.KindValidatingPolicy) {
			return nil
		}
		out = append(out, obj)
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no ClusterPolicy or ValidatingPolicy under %s", dir)
	}
	return out, err
}

// Compile compiles one policy read by Read.
func Compile(obj map[string]any) (*engine.Policy, error) {
	if obj["kind"] == policiesv1.KindValidatingPolicy {
		var vp policiesv1.ValidatingPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &vp); err != nil {
			return nil, fmt.Errorf("ValidatingPolicy %v: %w", obj["metadata"], err)
		}
		return engine.CompileValidatingPolicy(&vp)
	}
	var cp kyvernov1.ClusterPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &cp); err != nil {
		return nil, fmt.Errorf("ClusterPolicy %v: %w", obj["metadata"], err)
	}
	return engine.CompileClusterPolicy(&cp)
}

// Load compiles the policies under dir for a benchmark or test, which is
// skipped, saying so, when dir (the corpus) is absent.
func Load(tb testing.TB, dir string) []*engine.Policy {
	tb.Helper()
	if _, err := os.Stat(dir); err != nil {
		tb.Skipf("corpus not found at %s: %v", dir, err)
	}
	docs, err := Read(dir)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]*engine.Policy, 0, len(docs))
	for _, d := range docs {
		p, err := Compile(d)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}
