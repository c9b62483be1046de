package pattern

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/internal/corpus"
)

// corpusCase is one expectation of a kyverno-test.yaml that this package can
// decide alone: a pattern or anyPattern rule whose match is only a list of
// kinds, applied to a resource of one of those kinds.
type corpusCase struct {
	test, policy, rule, resource string
	want                         Status
	obj                          any
	pattern                      any   // set for pattern rules
	anyPattern                   []any // set for anyPattern rules
}

func (c corpusCase) name() string {
	return strings.Join([]string{c.test, c.policy, c.rule, c.resource}, "/")
}

func (c corpusCase) run() Result {
	if c.anyPattern != nil {
		return ValidateAny(c.obj, c.anyPattern)
	}
	return Validate(c.obj, c.pattern)
}

// TestPodSecurityCorpus checks the Pod Security Standards policies of
// Kyverno's policy library against the Pods of their own tests. Deployments
// and CronJobs are left out: their expectations come from autogen.
func TestPodSecurityCorpus(t *testing.T) {
	cases := loadCorpus(t, corpus.Path(t, "policy-library", "pod-security"), "Pod")
	if len(cases) < 50 {
		t.Fatalf("found only %d cases in the Pod Security corpus; the loader is probably broken", len(cases))
	}
	runCorpus(t, cases)
}

// TestCorpus checks every pattern rule of the corpus whose match is a plain
// list of kinds, against resources of those kinds.
func TestCorpus(t *testing.T) {
	cases := loadCorpus(t, corpus.Dir(t), "")
	if len(cases) < 100 {
		t.Fatalf("found only %d cases in the corpus; the loader is probably broken", len(cases))
	}
	runCorpus(t, cases)
}

func runCorpus(t *testing.T, cases []corpusCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			got := c.run()
			if got.Status != c.want {
				t.Errorf("got %v (path %q: %s), want %v", got.Status, got.Path, got.Message, c.want)
			}
		})
	}
}

// loadCorpus finds every kyverno-test.yaml under root and returns the cases
// it can decide; kind, if set, keeps only resources of that kind.
func loadCorpus(t *testing.T, root, kind string) []corpusCase {
	t.Helper()
	if _, err := os.Stat(root); err != nil {
		t.Skipf("corpus not available at %s: %v", root, err)
	}
	var tests []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "kyverno-test.yaml" {
			tests = append(tests, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	sort.Strings(tests)
	var cases []corpusCase
	for _, path := range tests {
		cases = append(cases, loadTest(t, root, path, kind)...)
	}
	return cases
}

type testFile struct {
	Policies  []string `json:"policies"`
	Resources []string `json:"resources"`
	Variables string   `json:"variables"`
	Results   []struct {
		Policy    string   `json:"policy"`
		Rule      string   `json:"rule"`
		Result    string   `json:"result"`
		Resources []string `json:"resources"`
	} `json:"results"`
}

type rule struct {
	Name          string          `json:"name"`
	Match         json.RawMessage `json:"match"`
	Exclude       json.RawMessage `json:"exclude"`
	Preconditions json.RawMessage `json:"preconditions"`
	Context       json.RawMessage `json:"context"`
	Validate      *struct {
		Pattern    any   `json:"pattern"`
		AnyPattern []any `json:"anyPattern"`
	} `json:"validate"`
}

type policy struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Rules []rule `json:"rules"`
	} `json:"spec"`
}

func loadTest(t *testing.T, root, path, kind string) []corpusCase {
	t.Helper()
	dir := filepath.Dir(path)
	var tf testFile
	if err := yaml.Unmarshal(readFile(t, path), &tf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if tf.Variables != "" {
		return nil // values may feed variables this package knows nothing of
	}
	rules := map[[2]string]rule{} // policy, rule -> rule
	for _, p := range tf.Policies {
		for _, doc := range readDocs(t, filepath.Join(dir, p)) {
			var pol policy
			if err := json.Unmarshal(doc, &pol); err != nil || pol.Kind != "ClusterPolicy" ||
				!strings.HasPrefix(pol.APIVersion, "kyverno.io/") {
				continue
			}
			for _, r := range pol.Spec.Rules {
				rules[[2]string{pol.Metadata.Name, r.Name}] = r
			}
		}
	}
	resources := map[string]map[string]any{} // name -> object
	for _, r := range tf.Resources {
		for _, doc := range readDocs(t, filepath.Join(dir, r)) {
			var obj map[string]any
			if err := json.Unmarshal(doc, &obj); err != nil || obj == nil {
				continue
			}
			meta, _ := obj["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			resources[name] = obj
		}
	}
	rel, _ := filepath.Rel(root, dir)
	var cases []corpusCase
	for _, res := range tf.Results {
		r, ok := rules[[2]string{res.Policy, res.Rule}]
		if !ok {
			continue
		}
		kinds, ok := plainKinds(r)
		if !ok {
			continue
		}
		want, ok := map[string]Status{"pass": Pass, "fail": Fail, "skip": Skip}[res.Result]
		if !ok {
			continue
		}
		for _, name := range res.Resources {
			obj, ok := resources[name[strings.LastIndexByte(name, '/')+1:]]
			if !ok {
				continue
			}
			k, _ := obj["kind"].(string)
			if !kinds[k] || (kind != "" && k != kind) {
				continue
			}
			cases = append(cases, corpusCase{test: rel, policy: res.Policy, rule: res.Rule, resource: name,
				want: want, obj: obj, pattern: r.Validate.Pattern, anyPattern: r.Validate.AnyPattern})
		}
	}
	return cases
}

var variable = regexp.MustCompile(`\{\{`)

// plainKinds returns the kinds a rule matches when it is a pattern rule
// selecting resources by kind only, without variables, preconditions or
// context.
func plainKinds(r rule) (map[string]bool, bool) {
	if r.Validate == nil || (r.Validate.Pattern == nil && r.Validate.AnyPattern == nil) ||
		len(r.Exclude) > 0 || len(r.Preconditions) > 0 || len(r.Context) > 0 {
		return nil, false
	}
	p, _ := json.Marshal(r.Validate)
	if variable.Match(p) {
		return nil, false
	}
	type filter struct {
		Resources map[string]any `json:"resources"`
	}
	var m struct {
		Any       []filter       `json:"any"`
		All       []filter       `json:"all"`
		Resources map[string]any `json:"resources"`
	}
	if err := json.Unmarshal(r.Match, &m); err != nil {
		return nil, false
	}
	filters := m.Any
	if len(m.All) == 1 && len(filters) == 0 {
		filters = m.All
	}
	if m.Resources != nil {
		filters = append(filters, filter{Resources: m.Resources})
	}
	if len(filters) != 1 || len(m.All) > 1 || (len(m.All) == 1 && len(m.Any) > 0) {
		return nil, false
	}
	res := filters[0].Resources
	if len(res) != 1 {
		return nil, false // names, namespaces, selectors... need the match package
	}
	list, _ := res["kinds"].([]any)
	kinds := map[string]bool{}
	for _, k := range list {
		s, _ := k.(string)
		if s == "" || strings.ContainsAny(s, "*?") {
			return nil, false
		}
		kinds[s[strings.LastIndexByte(s, '/')+1:]] = true
	}
	return kinds, len(kinds) > 0
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// readDocs reads the YAML documents of a file (or of every YAML file of a
// directory) as JSON.
func readDocs(t *testing.T, path string) [][]byte {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		return nil
	}
	if info.IsDir() {
		var out [][]byte
		entries, _ := os.ReadDir(path)
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); ext == ".yaml" || ext == ".yml" {
				out = append(out, readDocs(t, filepath.Join(path, e.Name()))...)
			}
		}
		return out
	}
	var out [][]byte
	for _, doc := range docSeparator.Split(string(readFile(t, path)), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			continue
		}
		out = append(out, j)
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}
