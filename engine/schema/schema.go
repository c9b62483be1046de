// Package schema checks ClusterPolicies and Policies, and the
// policies.kyverno.io policy kinds, against the OpenAPI schemas of their
// CRDs (config/crd/bases, embedded), with the API server's
// own structural-schema code: unknown fields (what pruning would drop),
// types, required fields and enums. A policy stored in a cluster has passed
// this check already; a policy read from a file has not.
package schema

import (
	"errors"
	"fmt"
	"sync"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apivalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tally-dev/tally/config/crd"
)

// Kinds checked.
const (
	KindClusterPolicy = "ClusterPolicy"
	KindPolicy        = "Policy"
)

// compiled is one CRD version's schema, ready to prune and validate with.
type compiled struct {
	structural *structuralschema.Structural
	validator  apivalidation.SchemaValidator
}

// kindSchemas are the schemas of each kind, each CRD decoded the first
// time a policy of its kind is checked (a run that reads ValidatingPolicies
// only does not decode the ClusterPolicy CRD, the largest).
var kindSchemas = map[string]*kindSchema{
	KindClusterPolicy: {crd: crd.ClusterPolicies}, KindPolicy: {crd: crd.Policies},
	"ValidatingPolicy": {crd: crd.ValidatingPolicies}, "NamespacedValidatingPolicy": {crd: crd.NamespacedValidatingPolicies},
	"MutatingPolicy": {crd: crd.MutatingPolicies}, "NamespacedMutatingPolicy": {crd: crd.NamespacedMutatingPolicies},
	"ImageValidatingPolicy": {crd: crd.ImageValidatingPolicies}, "NamespacedImageValidatingPolicy": {crd: crd.NamespacedImageValidatingPolicies},
}

type kindSchema struct {
	crd      []byte
	once     sync.Once
	versions map[string]*compiled
	err      error
}

func (k *kindSchema) load(kind string) {
	var def apiextv1.CustomResourceDefinition
	if err := sigsyaml.Unmarshal(k.crd, &def); err != nil {
		k.err = fmt.Errorf("decode the %s CRD: %w", kind, err)
		return
	}
	k.versions = map[string]*compiled{}
	for _, v := range def.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			k.err = fmt.Errorf("convert the %s %s schema: %w", kind, v.Name, err)
			return
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			k.err = fmt.Errorf("the %s %s schema is not structural: %w", kind, v.Name, err)
			return
		}
		validator, _, err := apivalidation.NewSchemaValidator(&internal)
		if err != nil {
			k.err = fmt.Errorf("the %s %s schema: %w", kind, v.Name, err)
			return
		}
		k.versions[v.Name] = &compiled{structural: s, validator: validator}
	}
}

func schemaFor(kind, version string) (*compiled, error) {
	k, ok := kindSchemas[kind]
	if !ok {
		return nil, fmt.Errorf("kind %s: no schema (want %s or %s)", kind, KindClusterPolicy, KindPolicy)
	}
	k.once.Do(func() { k.load(kind) })
	if k.err != nil {
		return nil, k.err
	}
	s, ok := k.versions[version]
	if !ok {
		return nil, fmt.Errorf("kind %s: version %s is not served", kind, version)
	}
	return s, nil
}

// Validate checks a whole ClusterPolicy or Policy object, as decoded from
// JSON or YAML (apiVersion kyverno.io/<version>), against its CRD's schema.
// Every problem is reported, each naming its field path
// (spec.validationFailureAction: Unsupported value: ...). obj is not changed.
func Validate(obj map[string]any) error {
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	version := "v1"
	if g, v, ok := cut(apiVersion); ok && (g == "kyverno.io" || g == "policies.kyverno.io") {
		version = v
	}
	s, err := schemaFor(kind, version)
	if err != nil {
		return err
	}
	return s.check(obj)
}

// ValidateSpec checks the spec of a ClusterPolicy or Policy (kyverno.io/v1)
// against its CRD's schema; field paths start at spec.
func ValidateSpec(kind string, spec map[string]any) error {
	s, err := schemaFor(kind, "v1")
	if err != nil {
		return err
	}
	return s.check(map[string]any{
		"apiVersion": "kyverno.io/v1",
		"kind":       kind,
		"metadata":   map[string]any{"name": "policy"},
		"spec":       spec,
	})
}

func (s *compiled) check(obj map[string]any) error {
	// Pruning removes what it reports: work on a copy.
	clone, ok := runtime.DeepCopyJSONValue(normalize(obj)).(map[string]any)
	if !ok {
		return errors.New("the policy is not an object")
	}
	var errs []error
	unknown := pruning.PruneWithOptions(clone, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, path := range unknown {
		errs = append(errs, fmt.Errorf("%s: unknown field (not in the CRD schema)", path))
	}
	invalid := apivalidation.ValidateCustomResource(nil, clone, s.validator)
	for _, e := range invalid {
		// kube-openapi adds a pathless summary of an allOf that failed
		// beside the error of the branch that failed, which names the
		// field: keep that one alone.
		if (e.Field == "" || e.Field == "<nil>") && len(invalid) > 1 {
			continue
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

func cut(apiVersion string) (group, version string, ok bool) {
	for i := len(apiVersion) - 1; i >= 0; i-- {
		if apiVersion[i] == '/' {
			return apiVersion[:i], apiVersion[i+1:], true
		}
	}
	return "", apiVersion, false
}

// normalize turns the values a YAML or JSON decoder may give into the JSON
// types runtime.DeepCopyJSONValue accepts (float64 and int64 numbers,
// []any, map[string]any), and drops what JSON cannot hold.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = normalize(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = normalize(x)
		}
		return out
	case int:
		return int64(t)
	case int32:
		return int64(t)
	case uint64:
		return float64(t)
	case float32:
		return float64(t)
	case string, bool, int64, float64, nil:
		return t
	}
	return fmt.Sprint(v)
}
