package match

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"

	"github.com/tally-dev/tally/internal/corpus"
)

// corpusDir is Kyverno's own CLI test suites, in the shared workspace.
var corpusDir = filepath.Join("..", "..", "..", "shared", "corpus")

// corpusTest is the part of a Kyverno CLI kyverno-test.yaml this test reads.
type corpusTest struct {
	Policies  []string `json:"policies"`
	Resources []string `json:"resources"`
	Variables string   `json:"variables"`
	UserInfo  string   `json:"userinfo"`
	Results   []struct {
		Policy    string   `json:"policy"`
		Rule      string   `json:"rule"`
		Result    string   `json:"result"`
		Kind      string   `json:"kind"`
		Resources []string `json:"resources"`
		Operation string   `json:"operation"`
	} `json:"results"`
}

type corpusValues struct {
	GlobalValues      map[string]any `json:"globalValues"`
	NamespaceSelector []struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"namespaceSelector"`
	Namespaces []struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	} `json:"namespaces"`
}

type corpusUserInfo struct {
	Roles        []string `json:"roles"`
	ClusterRoles []string `json:"clusterRoles"`
	UserInfo     struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"userInfo"`
}

type corpusPolicy struct {
	namespace   string
	annotations map[string]string
	rules       []kyvernov1.Rule
}

// TestCorpus checks matching and autogen against the expectations of
// Kyverno's CLI test suites: every row expecting fail, warn or error says
// that the rule (or one of its autogen rules: the CLI accepts
// autogen-<rule> and autogen-cronjob-<rule> for <rule>) selected the
// resource, so some rule of that name must match it. Rows expecting pass
// say nothing (the CLI counts an unmatched resource as a pass), nor do skip
// rows (an invalid policy is skipped too). Autogen must also accept every
// corpus policy.
func TestCorpus(t *testing.T) {
	corpusDir := corpus.Dir(t)
	var files []string
	err := filepath.WalkDir(corpusDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kyverno-test.yaml" {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checked, autogenRows := 0, 0
	for _, file := range files {
		rel, _ := filepath.Rel(corpusDir, filepath.Dir(file))
		t.Run(rel, func(t *testing.T) {
			for _, doc := range readDocs(t, file) {
				var ct corpusTest
				if err := yaml.Unmarshal(doc, &ct); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				n, c := checkCorpusTest(t, filepath.Dir(file), &ct)
				checked, autogenRows = checked+n, autogenRows+c
			}
		})
	}
	t.Logf("%d test files: %d (rule, resource) expectations checked, %d of them met by an autogen rule", len(files), checked, autogenRows)
	if checked == 0 {
		t.Error("no expectation was checked")
	}
}

func checkCorpusTest(t *testing.T, dir string, ct *corpusTest) (checked, autogenRows int) {
	t.Helper()
	policies := map[string]*corpusPolicy{}
	for _, p := range ct.Policies {
		for _, path := range yamlFiles(t, filepath.Join(dir, p)) {
			for _, doc := range readDocs(t, path) {
				loadCorpusPolicy(t, path, doc, policies)
			}
		}
	}
	var resources []Resource
	for _, r := range ct.Resources {
		for _, doc := range readDocs(t, filepath.Join(dir, r)) {
			resources = append(resources, corpusResources(t, doc)...)
		}
	}
	nsLabels := map[string]map[string]string{}
	op := ""
	if ct.Variables != "" {
		var v corpusValues
		readYAML(t, filepath.Join(dir, ct.Variables), &v)
		for _, n := range v.NamespaceSelector {
			nsLabels[n.Name] = n.Labels
		}
		for _, n := range v.Namespaces {
			nsLabels[n.Metadata.Name] = n.Metadata.Labels
		}
		op, _ = v.GlobalValues["request.operation"].(string)
	}
	var adm *Admission
	if ct.UserInfo != "" {
		var u corpusUserInfo
		readYAML(t, filepath.Join(dir, ct.UserInfo), &u)
		adm = &Admission{Username: u.UserInfo.Username, Groups: u.UserInfo.Groups, Roles: u.Roles, ClusterRoles: u.ClusterRoles}
	}
	for _, row := range ct.Results {
		if row.Rule == "" || (row.Result != "fail" && row.Result != "warn" && row.Result != "error") {
			continue
		}
		p := policies[row.Policy]
		if p == nil {
			continue // a CEL policy kind (ValidatingPolicy, ...): not matched by this package
		}
		rowAdm := adm
		if o := firstNonEmpty(row.Operation, op); o != "" {
			a := Admission{Operation: o}
			if adm != nil {
				a = *adm
				a.Operation = o
			}
			rowAdm = &a
		}
		for _, sel := range row.Resources {
			ns, name, found := strings.Cut(sel, "/")
			if !found {
				ns, name = "", sel
			}
			for i := range resources {
				res := &resources[i]
				if res.Name != name || (found && res.Namespace != ns) {
					continue
				}
				checked++
				by, known := corpusMatches(t, p, row.Rule, res, nsLabels[res.Namespace], rowAdm)
				if !known {
					t.Logf("policy %s has no rule %s (nor an autogen rule of it): row ignored", row.Policy, row.Rule)
					checked--
					break
				}
				if by != "" && by != row.Rule {
					autogenRows++
				}
				if by == "" {
					t.Errorf("policy %s rule %s: %s %s/%s expected %s but no rule of that name matches it",
						row.Policy, row.Rule, res.Kind, res.Namespace, res.Name, row.Result)
				}
			}
		}
	}
	return checked, autogenRows
}

// corpusMatches returns the name of the rule, among the rule and its
// autogen rules, that selects the resource ("" if none), and whether the
// policy has a rule of that name at all.
func corpusMatches(t *testing.T, p *corpusPolicy, rule string, res *Resource, nsLabels map[string]string, adm *Admission) (by string, known bool) {
	t.Helper()
	rules, err := Autogen(p.annotations, p.rules)
	if err != nil {
		t.Fatalf("Autogen: %v", err)
	}
	for i := range rules {
		r := &rules[i]
		if r.Name != rule && r.Name != autogenName(autogenPrefix, rule) && r.Name != autogenName(autogenCronJobPrefix, rule) {
			continue
		}
		known = true
		m, err := Compile(r.Match, r.Exclude)
		if err != nil {
			t.Errorf("rule %s: %v", r.Name, err)
			continue
		}
		if by == "" && InPolicyNamespace(p.namespace, *res) && m.Matches(res, nsLabels, adm) {
			by = r.Name
		}
	}
	return by, known
}

func loadCorpusPolicy(t *testing.T, path string, doc []byte, into map[string]*corpusPolicy) {
	t.Helper()
	var head struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil || (head.Kind != "ClusterPolicy" && head.Kind != "Policy") {
		return
	}
	var p kyvernov1.ClusterPolicy // a Policy has the same shape
	if err := yaml.Unmarshal(doc, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if _, err := Autogen(p.Annotations, p.Spec.Rules); err != nil {
		t.Errorf("%s: Autogen: %v", path, err)
	}
	cp := &corpusPolicy{annotations: p.Annotations, rules: p.Spec.Rules}
	name := p.Name
	if head.Kind == "Policy" {
		cp.namespace = p.Namespace
		if cp.namespace == "" {
			cp.namespace = "default"
		}
		name = cp.namespace + "/" + p.Name
		into[p.Name] = cp // rows may name a Policy without its namespace
	}
	into[name] = cp
}

// corpusResources turns a manifest (or a List of them) into Resources.
func corpusResources(t *testing.T, doc []byte) []Resource {
	t.Helper()
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name         string            `json:"name"`
			GenerateName string            `json:"generateName"`
			Namespace    string            `json:"namespace"`
			Labels       map[string]string `json:"labels"`
			Annotations  map[string]string `json:"annotations"`
		} `json:"metadata"`
		Items []map[string]any `json:"items"`
	}
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		t.Fatalf("resource: %v", err)
	}
	if strings.HasSuffix(obj.Kind, "List") && obj.Items != nil {
		var out []Resource
		for _, item := range obj.Items {
			b, err := yaml.Marshal(item)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, corpusResources(t, b)...)
		}
		return out
	}
	if obj.Kind == "" {
		return nil
	}
	group, version, found := strings.Cut(obj.APIVersion, "/")
	if !found {
		group, version = "", obj.APIVersion
	}
	return []Resource{{
		Group: group, Version: version, Kind: obj.Kind,
		Name: obj.Metadata.Name, GenerateName: obj.Metadata.GenerateName, Namespace: obj.Metadata.Namespace,
		Labels: obj.Metadata.Labels, Annotations: obj.Metadata.Annotations,
	}}
}

// yamlFiles returns path, or the YAML files of the directory path.
func yamlFiles(t *testing.T, path string) []string {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsDir() {
		return []string{path}
	}
	var out []string
	for _, ext := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(path, ext))
		out = append(out, m...)
	}
	return out
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readDocs splits a YAML file into its non-empty documents.
func readDocs(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
