package tester

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Input that is not Kubernetes YAML is refused, naming the file, the
// document and what is missing, where resources are read (ReadManifests)
// and where policies are (LoadPolicies); a resource read as a policy is
// refused as not a policy.
func TestInputThatIsNotKubernetesYAML(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		content string
		// wantResources and wantPolicies are the substrings of the errors
		// of ReadManifests and LoadPolicies ("" for none).
		wantResources, wantPolicies string
		// resources is how many documents ReadManifests keeps.
		resources int
	}{
		"a Helm values file": {
			content:       "replicaCount: 1\nimage: {repository: nginx}\n",
			wantResources: "document 1 is not a Kubernetes object: 'apiVersion' and 'kind' are missing",
			wantPolicies:  "document 1 is not a Kubernetes object: 'apiVersion' and 'kind' are missing",
		},
		"JSON without kind": {
			content:       `{"apiVersion": "v1", "metadata": {"name": "x"}}`,
			wantResources: "'kind' is missing", wantPolicies: "'kind' is missing",
		},
		"a document without apiVersion after a good one": {
			content:       "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: b}\n",
			wantResources: "document 2 is not a Kubernetes object: 'apiVersion' is missing", resources: 1,
			wantPolicies: "is not a policy",
		},
		"a list at the top": {
			content:       "- a\n- b\n",
			wantResources: "document 1 is not a Kubernetes object: it is a list, not a mapping",
			wantPolicies:  "it is a list, not a mapping",
		},
		"a List whose item has no kind": {
			content:       "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  metadata: {name: a}\n",
			wantResources: "'kind' is missing", wantPolicies: "'kind' is missing",
		},
		"a Pod is a resource, not a policy": {
			content:      "apiVersion: v1\nkind: Pod\nmetadata: {name: checkout}\n",
			resources:    1,
			wantPolicies: "Pod checkout (v1) is not a policy",
		},
		"a PolicyException is no policy either": {
			content:      "apiVersion: kyverno.io/v2\nkind: PolicyException\nmetadata: {name: x}\n",
			resources:    1,
			wantPolicies: "is a PolicyException, not a policy",
		},
		"a ClusterPolicy is a policy": {
			content:   "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - name: r\n    match: {any: [{resources: {kinds: [Pod]}}]}\n    validate: {pattern: {metadata: {name: '?*'}}}\n",
			resources: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			docs, err := ReadManifests(file)
			check(t, "ReadManifests", file, err, tc.wantResources)
			if len(docs) != tc.resources {
				t.Errorf("ReadManifests kept %d documents, want %d", len(docs), tc.resources)
			}
			_, err = LoadPolicies([]string{file})
			check(t, "LoadPolicies", file, err, tc.wantPolicies)
		})
	}
}

func check(t *testing.T, what, file string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", what, err)
	case want != "" && err == nil:
		t.Errorf("%s: no error, want %q", what, want)
	case want != "" && (!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file)):
		t.Errorf("%s: %v\nwant the file and %q", what, err, want)
	}
}

// A test whose resource file is not Kubernetes YAML cannot run: the run
// reports it among its errors, and its expectations fail with the reason.
func TestRunReportsUnreadableInputsOfATest(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"policy.yaml":       "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - name: r\n    match: {any: [{resources: {kinds: [Pod]}}]}\n    validate: {pattern: {metadata: {name: '?*'}}}\n",
		"values.yaml":       "replicaCount: 1\n",
		"kyverno-test.yaml": "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [values.yaml]\nresults:\n- {policy: p, rule: r, resources: [web], kind: Pod, result: pass}\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Run(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], "values.yaml: document 1 is not a Kubernetes object") {
		t.Errorf("errors %q, want one naming values.yaml", rep.Errors)
	}
	if rep.Counts.Failed != 1 {
		t.Errorf("counts %v, want the expectation failed", rep.Counts)
	}
}

// Finding no test file is not an error of the run: the caller decides
// (kyverno test exits 0, or 1 with --require-tests).
func TestRunWithoutTestFiles(t *testing.T) {
	rep, err := Run(context.Background(), []string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 0 || len(rep.Outcomes) != 0 {
		t.Errorf("files %d, outcomes %d: want none", rep.Files, len(rep.Outcomes))
	}
}

// The selector takes Kyverno's wildcards.
func TestSelectorWildcards(t *testing.T) {
	o := Outcome{Policy: "disallow-latest-tag", Rule: "require-image-tag", Resource: "shop/web"}
	tests := map[string]struct {
		selector string
		want     bool
	}{
		"empty selects all":                    {"", true},
		"Kyverno's default selects all":        {"policy=*,rule=*,resource=*", true},
		"exact names":                          {"policy=disallow-latest-tag, rule=require-image-tag, resource=web", true},
		"a prefix wildcard":                    {"policy=disallow-*", true},
		"a one-character wildcard":             {"resource=we?", true},
		"namespace/name":                       {"resource=shop/*", true},
		"another policy":                       {"policy=require-*", false},
		"a wildcard that matches nothing else": {"rule=*-tags", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sel, err := ParseSelector(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			if got := sel.selects(o); got != tc.want {
				t.Errorf("selects = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNotObjectErrorIsTyped(t *testing.T) {
	_, err := DecodeDocuments("x.json", []byte(`"just a string"`))
	var target *NotObjectError
	if !errors.As(err, &target) || target.Document != 1 {
		t.Errorf("%v: want a *NotObjectError for document 1", err)
	}
}
