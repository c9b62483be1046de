package schema

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func object(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

const typo = `apiVersion: kyverno.io/VERSION
kind: KIND
metadata: {name: p, namespace: n}
spec:
  validationFailureActoin: Enforce
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: "?*"}}}
`

func TestValidateFindsUnknownFieldsInEveryServedVersionAndKind(t *testing.T) {
	for _, kind := range []string{KindClusterPolicy, KindPolicy} {
		for _, version := range []string{"v1", "v2beta1"} {
			t.Run(kind+"/"+version, func(t *testing.T) {
				obj := object(t, strings.NewReplacer("VERSION", version, "KIND", kind).Replace(typo))
				before := object(t, strings.NewReplacer("VERSION", version, "KIND", kind).Replace(typo))
				err := Validate(obj)
				if err == nil || !strings.Contains(err.Error(), "spec.validationFailureActoin: unknown field") {
					t.Errorf("err = %v, want the unknown field named", err)
				}
				if !reflect.DeepEqual(obj, before) {
					t.Error("Validate changed the object it checked")
				}
			})
		}
	}
}

func TestValidateNamesKindsAndVersionsItHasNoSchemaFor(t *testing.T) {
	cases := map[string]struct{ apiVersion, kind, want string }{
		"a kind that is not a policy": {"kyverno.io/v1", "PolicyException", "kind PolicyException: no schema"},
		"a version not served":        {"kyverno.io/v9", KindClusterPolicy, "version v9 is not served"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Validate(map[string]any{"apiVersion": tc.apiVersion, "kind": tc.kind})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestValidateSpecReportsEnumsWithoutTheAllOfSummary(t *testing.T) {
	err := ValidateSpec(KindClusterPolicy, object(t, `rules: [{name: r, validate: {failureAction: audit}}]`))
	if err == nil {
		t.Fatal("validate.failureAction audit accepted; the CRD allows Audit and Enforce only")
	}
	if got := err.Error(); !strings.Contains(got, `spec.rules[0].validate.failureAction: Unsupported value: "audit"`) || strings.Contains(got, "<nil>") {
		t.Errorf("err = %q", got)
	}
}
