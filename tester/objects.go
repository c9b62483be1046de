package tester

import (
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
)

// NotObjectError is a document that is not a Kubernetes object: a Helm
// values file, JSON or YAML without apiVersion and kind. Kyverno's CLI
// refuses such input ("Object 'Kind' is missing"); so does tally, rather
// than evaluate nothing and pass.
type NotObjectError struct {
	File string
	// Document is the 1-based index of the document in its file.
	Document int
	// Problem says what is missing or wrong.
	Problem string
}

func (e *NotObjectError) Error() string {
	return fmt.Sprintf("%s: document %d is not a Kubernetes object: %s (a manifest needs apiVersion and kind; a Helm values file or other YAML/JSON is not one)", e.File, e.Document, e.Problem)
}

// CheckObject returns a *NotObjectError when a document lacks apiVersion or
// kind, as the API server would refuse it.
func CheckObject(d Document) error {
	var missing []string
	if s, _ := d.Object["apiVersion"].(string); s == "" {
		missing = append(missing, "'apiVersion'")
	}
	if s, _ := d.Object["kind"].(string); s == "" {
		missing = append(missing, "'kind'")
	}
	if len(missing) == 0 {
		return nil
	}
	verb := "is"
	if len(missing) > 1 {
		verb = "are"
	}
	return &NotObjectError{File: d.File, Document: d.Index + 1, Problem: strings.Join(missing, " and ") + " " + verb + " missing"}
}

// Objects keeps the documents that are Kubernetes objects; the others are
// returned as *NotObjectErrors, joined.
func Objects(docs []Document) ([]Document, error) {
	var out []Document
	var errs []error
	for _, d := range docs {
		if err := CheckObject(d); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}

// NotPolicyError is a Kubernetes object found where policies are read
// (Kyverno's CLI: "policy type not supported"): a resource, most often
// because policies and resources were given the other way round.
type NotPolicyError struct {
	File, APIVersion, Kind, Name string
}

func (e *NotPolicyError) Error() string {
	if e.Kind == "PolicyException" {
		return fmt.Sprintf("%s: %s %s is a PolicyException, not a policy (exceptions are read apart: --exception in apply, exceptions: in a test)", e.File, e.Kind, e.Name)
	}
	return fmt.Sprintf("%s: %s %s (%s) is not a policy: policies are ClusterPolicy, Policy, ValidatingPolicy, NamespacedValidatingPolicy, MutatingPolicy, NamespacedMutatingPolicy, ImageValidatingPolicy, NamespacedImageValidatingPolicy, ValidatingAdmissionPolicy and MutatingAdmissionPolicy (with their bindings)", e.File, e.Kind, e.Name, e.APIVersion)
}

// policyGroups are the API groups of policy kinds, tally's and the ones it
// does not evaluate yet (mutating, generating, image policies...).
var policyGroups = []string{"kyverno.io/", policiesv1.Group + "/", admissionregistrationv1.GroupName + "/"}

// CheckPolicyDocument returns a *NotObjectError for a document that is not
// a Kubernetes object and a *NotPolicyError for an object that is not a
// policy of any kind Kyverno knows; nil otherwise (which includes kinds
// tally does not evaluate: loadPolicy marks them unsupported).
func CheckPolicyDocument(d Document) error {
	if err := CheckObject(d); err != nil {
		return err
	}
	apiVersion, _ := d.Object["apiVersion"].(string)
	kind, _ := d.Object["kind"].(string)
	md, _ := d.Object["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	notPolicy := &NotPolicyError{File: d.File, APIVersion: apiVersion, Kind: kind, Name: name}
	if kind == "PolicyException" {
		return notPolicy
	}
	for _, g := range policyGroups {
		if !strings.HasPrefix(apiVersion, g) {
			continue
		}
		if g != admissionregistrationv1.GroupName+"/" || strings.HasSuffix(kind, "Policy") || strings.HasSuffix(kind, "PolicyBinding") {
			return nil
		}
	}
	return notPolicy
}

// IsPolicyKind reports whether an object is a policy tally evaluates:
// used to tell that policies and resources were given the other way round.
func IsPolicyKind(obj map[string]any) bool {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	switch {
	case strings.HasPrefix(apiVersion, "kyverno.io/"):
		return kind == "ClusterPolicy" || kind == "Policy"
	case strings.HasPrefix(apiVersion, policiesv1.Group+"/"):
		return kind == policiesv1.KindValidatingPolicy || kind == policiesv1.KindNamespacedValidatingPolicy ||
			kind == policiesv1.KindMutatingPolicy || kind == policiesv1.KindNamespacedMutatingPolicy ||
			kind == policiesv1.KindImageValidatingPolicy || kind == policiesv1.KindNamespacedImageValidatingPolicy
	case strings.HasPrefix(apiVersion, admissionregistrationv1.GroupName+"/"):
		return kind == kindVAP || kind == kindMAP
	}
	return false
}
