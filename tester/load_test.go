package tester

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorpusPoliciesAreAccepted loads every policy that the tests of the
// corpus name (ClusterPolicies and Policies, with and without validate.cel;
// ValidatingPolicies): Kyverno accepts them all, so none may be refused by
// tally's checks (schema, semantic rules, Malformed, CEL compilation) and
// none may be unsupported. Every policy the Kyverno CLI printed a result for
// (ORACLE.jsonl) must be among those tally loaded from its folder.
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
		if len(cols) >= 3 && cols[0] != "suite" {
			dirs = append(dirs, filepath.Join(corpus, cols[0], cols[1]))
		}
	}
	accepted := map[string]bool{} // folder + "\x00" + policy name

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
						t.Errorf("unsupported: %v", lp.Unsupported)
						continue
					}
					checked++
					if lp.Invalid == nil {
						accepted[dir+"\x00"+lp.Name] = true
					}
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
	if checked < 250 {
		t.Fatalf("only %d policies checked: the corpus was not read", checked)
	}
	t.Logf("%d policies of the corpus accepted", checked)
	oracle, err := os.ReadFile(filepath.Join(corpus, "ORACLE.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(oracle)), "\n") {
		var r struct{ Suite, Test, Policy string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("ORACLE.jsonl: %v", err)
		}
		key := filepath.Join(corpus, r.Suite, r.Test) + "\x00" + r.Policy
		if seen[key] {
			continue
		}
		seen[key] = true
		if !accepted[key] {
			t.Errorf("%s/%s: policy %s, which the Kyverno CLI loaded, was not loaded", r.Suite, r.Test, r.Policy)
		}
	}
	if len(seen) < 250 {
		t.Fatalf("only %d policies of ORACLE.jsonl checked: it was not read", len(seen))
	}
	t.Logf("%d policies the Kyverno CLI loaded are loaded", len(seen))
}

// A ValidatingPolicy that cannot be evaluated is refused with the reason,
// naming the file, the policy and the field: an unknown field, an
// expression that does not compile (the compiler's message), one of the
// wrong type.
func TestBadValidatingPoliciesAreRefused(t *testing.T) {
	tests := map[string]struct{ spec, want string }{
		"an unknown field": {
			spec: "validationz: []\n  validations: [{expression: 'true'}]",
			want: `spec.validationz: unknown field`,
		},
		"an expression that does not compile": {
			spec: "validations: [{expression: 'object.('}]",
			want: "validations[0].expression: compilation failed: ERROR: <input>:1:8: Syntax error",
		},
		"a validation that is not a bool": {
			spec: "validations: [{expression: \"'x'\"}]",
			want: "validations[0].expression: must evaluate to bool but got string",
		},
		"a messageExpression that is not a string": {
			spec: "validations: [{expression: 'true', messageExpression: '1'}]",
			want: "validations[0].messageExpression: must evaluate to string but got int",
		},
		"no validation": {
			spec: "validations: []",
			want: "spec.validations: at least one validation is required",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "vpol.yaml")
			doc := "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: bad}\nspec:\n  matchConstraints: {resourceRules: [{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}\n  " + tc.spec + "\n"
			if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			loaded, err := LoadPolicies([]string{file})
			if err != nil {
				t.Fatal(err)
			}
			if len(loaded) != 1 || loaded[0].Invalid == nil {
				t.Fatalf("not refused: %+v", loaded)
			}
			msg := loaded[0].Invalid.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, file) || !strings.Contains(msg, "ValidatingPolicy bad") {
				t.Errorf("got %q, want the file, the policy and %q", msg, tc.want)
			}
		})
	}
}
