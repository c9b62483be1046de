package match

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestAutogen runs Autogen on every testdata/TestAutogen/<case>/policy.yaml
// and compares the rules with <case>/want.yaml (go test -update rewrites it).
func TestAutogen(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", t.Name(), "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			p := readPolicy(t, filepath.Join(dir, "policy.yaml"))
			before := p.DeepCopy()
			rules, err := Autogen(p.Annotations, p.Spec.Rules)
			if err != nil {
				t.Fatalf("Autogen: %v", err)
			}
			if !reflect.DeepEqual(before.Spec.Rules, p.Spec.Rules) {
				t.Error("Autogen modified its input")
			}
			got, err := yaml.Marshal(rules)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(dir, "want.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rules differ from %s (go test -update rewrites it):\n%s", golden, got)
			}
			// Every generated rule must compile and select the controller kinds.
			for i := range rules {
				if _, err := Compile(rules[i].Match, rules[i].Exclude); err != nil {
					t.Errorf("rule %s: %v", rules[i].Name, err)
				}
			}
		})
	}
}

func readPolicy(t testing.TB, path string) *kyvernov1.ClusterPolicy {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p kyvernov1.ClusterPolicy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &p
}

func TestAutogenControllers(t *testing.T) {
	podRule := kyvernov1.Rule{Name: "r", Match: kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{
		{Resources: kyvernov1.ResourceDescription{Kinds: []string{"Pod"}}}}}}
	all := []string{"CronJob", "DaemonSet", "Deployment", "Job", "ReplicaSet", "ReplicationController", "StatefulSet"}
	tests := map[string]struct {
		annotation *string
		rules      []kyvernov1.Rule
		want       []string
	}{
		"no annotation gives every controller":     {rules: []kyvernov1.Rule{podRule}, want: all},
		"none gives none":                          {annotation: ptr("none"), rules: []kyvernov1.Rule{podRule}},
		"a list is deduplicated and sorted":        {annotation: ptr(" StatefulSet,Deployment ,StatefulSet"), rules: []kyvernov1.Rule{podRule}, want: []string{"Deployment", "StatefulSet"}},
		"all stands for every controller":          {annotation: ptr("all"), rules: []kyvernov1.Rule{podRule}, want: all},
		"an empty annotation gives none":           {annotation: ptr(""), rules: []kyvernov1.Rule{podRule}},
		"custom kinds are kept":                    {annotation: ptr("CloneSet"), rules: []kyvernov1.Rule{podRule}, want: []string{"CloneSet"}},
		"the annotation cannot force autogen":      {annotation: ptr("Deployment"), rules: []kyvernov1.Rule{withSelector(podRule)}},
		"a policy without Pod or controllers":      {rules: []kyvernov1.Rule{{Name: "s", Match: kyvernov1.MatchResources{Resources: kyvernov1.ResourceDescription{Kinds: []string{"Service"}}}}}},
		"a policy with a generate rule gets none":  {rules: []kyvernov1.Rule{podRule, {Name: "g", Generate: jsonRaw(`{"kind":"ConfigMap"}`)}}},
		"a policy with no rules gets none":         {},
		"a selector in an exclude disables it too": {rules: []kyvernov1.Rule{withExcludeAnnotations(podRule)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ann map[string]string
			if tc.annotation != nil {
				ann = map[string]string{AnnotationAutogenControllers: *tc.annotation}
			}
			if got := AutogenControllers(ann, tc.rules); !slices.Equal(got, tc.want) {
				t.Errorf("AutogenControllers = %q, want %q", got, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func withSelector(r kyvernov1.Rule) kyvernov1.Rule {
	r = *r.DeepCopy()
	r.Match.Any[0].Resources.Selector = &metaLabelSelector
	return r
}

func withExcludeAnnotations(r kyvernov1.Rule) kyvernov1.Rule {
	r = *r.DeepCopy()
	r.Exclude = &kyvernov1.MatchResources{Any: kyvernov1.ResourceFilters{
		{Resources: kyvernov1.ResourceDescription{Annotations: map[string]string{"skip": "true"}}}}}
	return r
}

func TestShiftReferences(t *testing.T) {
	tests := map[string]struct {
		in, want string
		roots    []string
	}{
		"spec gains the template":               {"{{ request.object.spec.containers }}", "{{ request.object.spec.template.spec.containers }}", jmesPathRoots},
		"metadata gains the template":           {"{{request.object.metadata.labels}}", "{{request.object.spec.template.metadata.labels}}", jmesPathRoots},
		"oldObject is shifted too":              {"request.oldObject.spec", "request.oldObject.spec.template.spec", jmesPathRoots},
		"several references are shifted":        {"request.object.spec.a == request.object.metadata.b", "request.object.spec.template.spec.a == request.object.spec.template.metadata.b", jmesPathRoots},
		"other fields are left alone":           {"request.object.status.phase request.object.kind", "request.object.status.phase request.object.kind", jmesPathRoots},
		"a longer field name is left alone":     {"request.object.specs request.object.metadataX", "request.object.specs request.object.metadataX", jmesPathRoots},
		"a quoted object is left alone":         {`request."object".metadata`, `request."object".metadata`, jmesPathRoots},
		"CEL object references are shifted":     {"has(object.metadata.annotations) && oldObject.spec.x", "has(object.spec.template.metadata.annotations) && oldObject.spec.template.spec.x", celRoots},
		"CEL does not shift inside other paths": {"request.object.spec myobject.spec params.object.spec", "request.object.spec myobject.spec params.object.spec", celRoots},
		"a reference at the very end":           {"object.spec", "object.spec.template.spec", celRoots},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := string(shiftReferences([]byte(tc.in), tc.roots, templateTarget.shift)); got != tc.want {
				t.Errorf("shiftReferences(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

var metaLabelSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}

func jsonRaw(s string) *apiextv1.JSON { return &apiextv1.JSON{Raw: []byte(s)} }
