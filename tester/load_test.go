package tester

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorpusPoliciesAreAccepted loads every ClusterPolicy and Policy that
// the tests of the supported tiers (classic, classic-ctx) name: Kyverno
// accepts them all, so none may be refused by tally's checks (schema,
// semantic rules, Malformed).
func TestCorpusPoliciesAreAccepted(t *testing.T) {
	corpus := corpusDir(t)
	f, err := os.Open(filepath.Join(corpus, "INDEX.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) >= 3 && (cols[2] == "classic" || cols[2] == "classic-ctx") {
			dirs = append(dirs, filepath.Join(corpus, cols[0], cols[1]))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range dirs {
		files, err := Discover([]string{dir})
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			docs, err := ReadDocuments(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				test, err := testOf(file, d)
				if err != nil {
					t.Fatal(err)
				}
				var paths []string
				for _, p := range test.Policies {
					paths = append(paths, filepath.Join(filepath.Dir(file), p))
				}
				loaded, err := LoadPolicies(paths)
				if err != nil {
					t.Errorf("%s: %v", file, err)
				}
				for _, lp := range loaded {
					if lp.Unsupported != nil {
						continue
					}
					checked++
					var inv *InvalidPolicyError
					if lp.Invalid != nil {
						if !errors.As(lp.Invalid, &inv) {
							t.Errorf("%s: the error does not name the file and policy: %v", lp.Name, lp.Invalid)
						}
						t.Errorf("refused: %v", lp.Invalid)
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d policies checked: the corpus was not read", checked)
	}
	t.Logf("%d policies of the classic tiers accepted", checked)
}
