package tester

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/schema"
)

// TestFileName is the name of the files `tally test` runs.
const TestFileName = "kyverno-test.yaml"

// Discover returns every test file under the given paths (a path may also
// name a test file), sorted.
func Discover(paths []string) ([]string, error) { return DiscoverNamed(paths, "") }

// DiscoverNamed is Discover for test files of another name (Kyverno's
// --file-name); "" means kyverno-test.yaml (or .yml).
func DiscoverNamed(paths []string, name string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if (name == "" && (d.Name() == TestFileName || d.Name() == "kyverno-test.yml")) || (name != "" && d.Name() == name) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	return files, nil
}

// Document is one YAML document of a file, decoded into a generic map.
type Document struct {
	File   string
	Index  int
	Object map[string]any
}

// ReadDocuments decodes every YAML document of a file; `List` kinds are
// expanded into their items.
func ReadDocuments(file string) ([]Document, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return DecodeDocuments(file, data)
}

// DecodeDocuments is ReadDocuments on the content of a file: file only
// names it in Documents and errors.
func DecodeDocuments(file string, data []byte) ([]Document, error) {
	reader := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []Document
	for i := 0; ; i++ {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		if len(bytes.TrimSpace(chunk)) == 0 {
			continue
		}
		var v any
		if err := sigsyaml.Unmarshal(chunk, &v); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		if v == nil {
			continue
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, &NotObjectError{File: file, Document: i + 1, Problem: fmt.Sprintf("it is %s, not a mapping", shapeOf(v))}
		}
		if kind, _ := obj["kind"].(string); strings.HasSuffix(kind, "List") && obj["items"] != nil {
			items, _ := obj["items"].([]any)
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					docs = append(docs, Document{File: file, Index: i, Object: m})
				}
			}
			continue
		}
		docs = append(docs, Document{File: file, Index: i, Object: obj})
	}
	return docs, nil
}

// shapeOf names the YAML shape of a value that is not a mapping.
func shapeOf(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	}
	return "a number"
}

// IsManifest reports whether a file name is a manifest's: .yaml, .yml or
// .json (JSON is YAML; a file of one object, or of a List).
func IsManifest(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")
}

// yamlFiles lists a file, or the manifest files of a folder (not recursive).
func yamlFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && IsManifest(e.Name()) {
			out = append(out, filepath.Join(path, e.Name()))
		}
	}
	return out, nil
}

// LoadedPolicy is a policy read from a file: compiled, or why it could not be.
type LoadedPolicy struct {
	Name string // report name ("name" or "namespace/name")
	Kind string
	File string
	// Policy is nil when the policy could not be compiled or its kind is not supported.
	Policy *engine.Policy
	// Invalid is set when the policy was rejected by validation (Kyverno skips such policies).
	Invalid error
	// Unsupported is set for kinds tally does not evaluate (ValidatingPolicy, ...).
	Unsupported error
}

// LoadPolicies reads the policies of files or folders: ClusterPolicies and
// Policies, ValidatingPolicies and NamespacedValidatingPolicies, Kubernetes
// ValidatingAdmissionPolicies (with their bindings).
// Problems with one policy are recorded on it; the error is for unreadable input.
func LoadPolicies(paths []string) ([]*LoadedPolicy, error) {
	var all []Document
	var errs []error
	for _, p := range paths {
		files, err := yamlFiles(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range files {
			docs, err := ReadDocuments(f)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			all = append(all, docs...)
		}
	}
	out, err := LoadPolicyDocuments(all)
	return out, errors.Join(append(errs, err)...)
}

// LoadPolicyDocuments is LoadPolicies on documents already read. A
// document that is not a Kubernetes object (*NotObjectError) or not a
// policy (*NotPolicyError) is an error, and the others are still loaded.
func LoadPolicyDocuments(all []Document) ([]*LoadedPolicy, error) {
	var out []*LoadedPolicy
	var errs []error
	// ValidatingAdmissionPolicyBindings are read first: each policy is
	// compiled with the bindings that name it.
	var bindings admissionBindings
	for _, d := range all {
		switch {
		case isVAPKind(d, kindVAPBinding):
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &b); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", d.File, kindVAPBinding, err))
				continue
			}
			bindings.validating = append(bindings.validating, &b)
		case isVAPKind(d, kindMAPBinding):
			var b admissionregistrationv1beta1.MutatingAdmissionPolicyBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &b); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", d.File, kindMAPBinding, err))
				continue
			}
			bindings.mutating = append(bindings.mutating, &b)
		}
	}
	for _, d := range all {
		// Input that is not a policy at all (a values file, a resource) is
		// an error of the input, as in Kyverno's CLI, not a policy to skip.
		if err := CheckPolicyDocument(d); err != nil {
			errs = append(errs, err)
			continue
		}
		if isVAPKind(d, kindVAPBinding) || isVAPKind(d, kindMAPBinding) {
			continue
		}
		out = append(out, loadPolicy(d, bindings))
	}
	return out, errors.Join(errs...)
}

const (
	kindVAP        = "ValidatingAdmissionPolicy"
	kindVAPBinding = "ValidatingAdmissionPolicyBinding"
	kindMAP        = "MutatingAdmissionPolicy"
	kindMAPBinding = "MutatingAdmissionPolicyBinding"
)

// admissionBindings are the bindings of Kubernetes' admission policies
// read beside them.
type admissionBindings struct {
	validating []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	mutating   []*admissionregistrationv1beta1.MutatingAdmissionPolicyBinding
}

// isVAPKind reports whether a document is an admissionregistration.k8s.io kind.
func isVAPKind(d Document, kind string) bool {
	apiVersion, _ := d.Object["apiVersion"].(string)
	k, _ := d.Object["kind"].(string)
	return k == kind && strings.HasPrefix(apiVersion, admissionregistrationv1.GroupName+"/")
}

// loadValidatingAdmissionPolicy reads a Kubernetes ValidatingAdmissionPolicy
// and compiles it with its bindings.
func loadValidatingAdmissionPolicy(d Document, lp *LoadedPolicy, bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) *LoadedPolicy {
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &vap)
	if err == nil {
		lp.Policy, err = engine.CompileValidatingAdmissionPolicy(&vap, bindings)
	}
	if err != nil {
		lp.Invalid = &InvalidPolicyError{File: d.File, Kind: lp.Kind, Name: lp.Name, Err: err}
	}
	return lp
}

// loadMutatingAdmissionPolicy reads a Kubernetes MutatingAdmissionPolicy
// (v1beta1, or v1alpha1 of the same shape) and compiles it with its
// bindings.
func loadMutatingAdmissionPolicy(d Document, lp *LoadedPolicy, bindings []*admissionregistrationv1beta1.MutatingAdmissionPolicyBinding) *LoadedPolicy {
	var p admissionregistrationv1beta1.MutatingAdmissionPolicy
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &p)
	if err == nil {
		lp.Policy, err = engine.CompileMutatingAdmissionPolicy(&p, bindings)
	}
	if err != nil {
		lp.Invalid = &InvalidPolicyError{File: d.File, Kind: lp.Kind, Name: lp.Name, Err: err}
	}
	return lp
}

func loadPolicy(d Document, bindings admissionBindings) *LoadedPolicy {
	kind, _ := d.Object["kind"].(string)
	apiVersion, _ := d.Object["apiVersion"].(string)
	md, _ := d.Object["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	lp := &LoadedPolicy{Name: name, Kind: kind, File: d.File}
	if err := CheckPolicyDocument(d); err != nil {
		lp.Unsupported = err
		return lp
	}
	if kind == "Policy" {
		if ns == "" {
			ns = "default"
		}
		lp.Name = ns + "/" + name
	}
	if strings.HasPrefix(apiVersion, policiesv1.Group+"/") && (kind == policiesv1.KindValidatingPolicy || kind == policiesv1.KindNamespacedValidatingPolicy) {
		return loadCELPolicy(d, lp, policiesv1.KindNamespacedValidatingPolicy, engine.CompileValidatingPolicy)
	}
	if strings.HasPrefix(apiVersion, policiesv1.Group+"/") && (kind == policiesv1.KindMutatingPolicy || kind == policiesv1.KindNamespacedMutatingPolicy) {
		return loadCELPolicy(d, lp, policiesv1.KindNamespacedMutatingPolicy, engine.CompileMutatingPolicy)
	}
	if strings.HasPrefix(apiVersion, policiesv1.Group+"/") && (kind == policiesv1.KindImageValidatingPolicy || kind == policiesv1.KindNamespacedImageValidatingPolicy) {
		return loadCELPolicy(d, lp, policiesv1.KindNamespacedImageValidatingPolicy, engine.CompileImageValidatingPolicy)
	}
	if strings.HasPrefix(apiVersion, policiesv1.Group+"/") && (kind == engine.KindDeletingPolicy || kind == engine.KindNamespacedDeletingPolicy || kind == engine.KindGeneratingPolicy || kind == engine.KindNamespacedGeneratingPolicy) {
		compile := engine.CompileDeletingPolicy
		if kind == engine.KindGeneratingPolicy || kind == engine.KindNamespacedGeneratingPolicy {
			compile = engine.CompileGeneratingPolicy
		}
		raw, err := json.Marshal(d.Object)
		if err == nil {
			lp.Policy, err = compile(raw)
		}
		if err != nil {
			lp.Invalid = &InvalidPolicyError{File: d.File, Kind: kind, Name: lp.Name, Err: err}
		} else if kind == engine.KindNamespacedDeletingPolicy || kind == engine.KindNamespacedGeneratingPolicy {
			lp.Name = lp.Policy.Name
		}
		return lp
	}
	if isVAPKind(d, kindVAP) {
		return loadValidatingAdmissionPolicy(d, lp, bindings.validating)
	}
	if isVAPKind(d, kindMAP) {
		return loadMutatingAdmissionPolicy(d, lp, bindings.mutating)
	}
	if !strings.HasPrefix(apiVersion, "kyverno.io/") || (kind != "ClusterPolicy" && kind != "Policy") {
		lp.Unsupported = fmt.Errorf("%s: %s %s (%s) is not supported by tally yet", d.File, kind, name, apiVersion)
		return lp
	}
	data, err := sigsyaml.Marshal(d.Object)
	if err != nil {
		lp.Invalid = &InvalidPolicyError{File: d.File, Kind: kind, Name: lp.Name, Err: err}
		return lp
	}
	var spec *kyvernov1.Spec
	var compile func() (*engine.Policy, error)
	if kind == "ClusterPolicy" {
		var cp kyvernov1.ClusterPolicy
		err = sigsyaml.Unmarshal(data, &cp)
		spec = &cp.Spec
		compile = func() (*engine.Policy, error) { return engine.CompileClusterPolicy(&cp) }
	} else {
		var p kyvernov1.Policy
		err = sigsyaml.Unmarshal(data, &p)
		if p.Namespace == "" {
			p.Namespace = "default"
		}
		spec = &p.Spec
		compile = func() (*engine.Policy, error) { return engine.CompilePolicy(&p) }
	}
	if err != nil {
		lp.Invalid = &InvalidPolicyError{File: d.File, Kind: kind, Name: lp.Name, Err: err}
		return lp
	}
	// The checks a cluster makes before a policy is used: the CRD's schema
	// (the API server's), then what tally's webhook and scanner refuse.
	// Every reason is reported at once.
	errs := []error{engine.CheckObject(d.Object), engine.ValidateBackground(spec)}
	p, err := compile()
	if err == nil {
		err = engine.Malformed(p)
	}
	if err = errors.Join(append(errs, err)...); err != nil {
		lp.Invalid = &InvalidPolicyError{File: d.File, Kind: kind, Name: lp.Name, Err: err}
		return lp
	}
	lp.Policy = p
	return lp
}

// loadCELPolicy reads a policies.kyverno.io policy of type T strictly
// (every served version has the same spec) and compiles it; one of the
// namespaced kind without a namespace is put in "default". One whose
// expressions do not compile is refused with the compiler's messages.
func loadCELPolicy[T any, P interface {
	*T
	metav1.Object
}](d Document, lp *LoadedPolicy, namespacedKind string, compile func(P) (*engine.Policy, error)) *LoadedPolicy {
	// The checks a cluster makes first: the CRD's schema (required
	// fields, enums, types), as for the classic kinds.
	if err := schema.Validate(d.Object); err != nil {
		lp.Invalid = &InvalidPolicyError{File: d.File, Kind: lp.Kind, Name: lp.Name, Err: err}
		return lp
	}
	data, err := sigsyaml.Marshal(d.Object)
	if err == nil {
		p := P(new(T))
		if err = sigsyaml.UnmarshalStrict(data, p); err == nil {
			if lp.Kind == namespacedKind && p.GetNamespace() == "" {
				p.SetNamespace("default")
				lp.Name = "default/" + p.GetName()
			}
			lp.Policy, err = compile(p)
		}
	}
	if err != nil {
		lp.Invalid = &InvalidPolicyError{File: d.File, Kind: lp.Kind, Name: lp.Name, Err: err}
	}
	return lp
}

// InvalidPolicyError is why a policy read from a file is refused: it names
// the file, the policy and, in Err, the field paths at fault.
type InvalidPolicyError struct {
	File, Kind, Name string
	Err              error
}

// Error is one line: every reason of Err once (the schema's are found both
// on the object and on its spec), separated by "; ".
func (e *InvalidPolicyError) Error() string {
	var reasons []string
	for _, r := range strings.Split(e.Err.Error(), "\n") {
		if r = strings.TrimSpace(r); r != "" && !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	return fmt.Sprintf("%s: %s %s: %s", e.File, e.Kind, e.Name, strings.Join(reasons, "; "))
}

func (e *InvalidPolicyError) Unwrap() error { return e.Err }

// Exceptions are the PolicyExceptions read from files: kyverno.io ones
// (for ClusterPolicies and Policies) and policies.kyverno.io ones (for
// ValidatingPolicies).
type Exceptions struct {
	Classic []*engine.Exception
	CEL     []*engine.CELException
}

// Request returns an engine request for an object with these exceptions.
func (x Exceptions) Request(obj map[string]any) *engine.Request {
	return &engine.Request{Object: obj, Exceptions: x.Classic, CELExceptions: x.CEL}
}

// LoadExceptions reads PolicyExceptions from files.
func LoadExceptions(paths []string) (Exceptions, error) {
	var out Exceptions
	var errs []error
	for _, p := range paths {
		docs, err := ReadDocuments(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if docs, err = Objects(docs); err != nil {
			errs = append(errs, err)
		}
		for _, d := range docs {
			if kind, _ := d.Object["kind"].(string); kind != "PolicyException" {
				continue
			}
			data, err := sigsyaml.Marshal(d.Object)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
				continue
			}
			if apiVersion, _ := d.Object["apiVersion"].(string); strings.HasPrefix(apiVersion, policiesv1.Group+"/") {
				var pe policiesv1.PolicyException
				if err := sigsyaml.Unmarshal(data, &pe); err != nil {
					errs = append(errs, fmt.Errorf("%s: PolicyException: %w", p, err))
					continue
				}
				x, err := engine.CompileCELException(&pe)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", p, err))
					continue
				}
				out.CEL = append(out.CEL, x)
				continue
			}
			var pe kyvernov2.PolicyException
			if err := sigsyaml.Unmarshal(data, &pe); err != nil {
				errs = append(errs, fmt.Errorf("%s: PolicyException: %w", p, err))
				continue
			}
			ex, err := engine.CompileException(&pe)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
				continue
			}
			out.Classic = append(out.Classic, ex)
		}
	}
	return out, errors.Join(errs...)
}

// ReadManifests reads every document of a file, or of the YAML files of a
// folder. A document that is not a Kubernetes object (no apiVersion or
// kind) is left out and reported as a *NotObjectError in the error.
func ReadManifests(path string) ([]Document, error) {
	files, err := yamlFiles(path)
	if err != nil {
		return nil, err
	}
	var out []Document
	var errs []error
	for _, f := range files {
		docs, err := ReadDocuments(f)
		if err != nil {
			errs = append(errs, err)
		}
		docs, err = Objects(docs)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, docs...)
	}
	return out, errors.Join(errs...)
}
