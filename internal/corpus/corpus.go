// Package corpus finds Kyverno's test corpus (the shared folder's corpus/:
// Kyverno's own CLI test suites and ORACLE.jsonl) for tests and benchmarks.
package corpus

import (
	"os"
	"path/filepath"
	"testing"
)

// Env names the corpus folder explicitly.
const Env = "TALLY_CORPUS"

// Dir returns the corpus: $TALLY_CORPUS, else ../shared/corpus beside the
// repository's root (the folder of go.mod). Where it is absent the test is
// skipped, saying where it looked, except in CI (CI set), where it fails.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv(Env)
	if dir == "" {
		dir = filepath.Join(root(), "..", "shared", "corpus")
	}
	if _, err := os.Stat(filepath.Join(dir, "INDEX.tsv")); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("corpus not found at %s (set %s): %v", dir, Env, err)
		}
		tb.Skipf("corpus not found at %s (set %s, or clone tally beside the shared folder): %v", dir, Env, err)
	}
	return dir
}

// Path is a path inside the corpus (see Dir).
func Path(tb testing.TB, elem ...string) string {
	tb.Helper()
	return filepath.Join(append([]string{Dir(tb)}, elem...)...)
}

// root is the nearest folder above the working directory (a package's
// folder, under go test) that holds go.mod.
func root() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// BeyondEnv names the corpus beyond validate explicitly.
const BeyondEnv = "TALLY_CORPUS_BEYOND"

// BeyondDir returns the corpus beyond validate (Kyverno's CLI test folders
// for mutate, generate, MutatingPolicy, mocks, JSON...; KYVERNO.tsv gives
// Kyverno's own verdict per folder): $TALLY_CORPUS_BEYOND, else
// ../shared/corpus-beyond beside the repository's root. Absent, the test is
// skipped, saying where it looked, except in CI, where it fails.
func BeyondDir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv(BeyondEnv)
	if dir == "" {
		dir = filepath.Join(root(), "..", "shared", "corpus-beyond")
	}
	if _, err := os.Stat(filepath.Join(dir, "KYVERNO.tsv")); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("corpus-beyond not found at %s (set %s): %v", dir, BeyondEnv, err)
		}
		tb.Skipf("corpus-beyond not found at %s (set %s, or clone tally beside the shared folder): %v", dir, BeyondEnv, err)
	}
	return dir
}
