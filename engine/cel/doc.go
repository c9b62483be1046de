// Package cel compiles and evaluates the CEL expressions of Kyverno's CEL
// policies on Kubernetes' own CEL stack: the API server's base environment
// (k8s.io/apiserver/pkg/cel/environment: its libraries, cost estimates and
// type checking), the admission variables (object, oldObject, request,
// namespaceObject, params) with the API server's declared types, and
// variables composed lazily as a ValidatingAdmissionPolicy's are.
//
// A Program is compiled once per policy and is safe for concurrent use;
// Evaluate runs it on one Input. What a result means (pass, fail, skip,
// error and their messages) differs between validate.cel rules,
// ValidatingPolicies and ValidatingAdmissionPolicies, and is decided by the
// engine from the Outcome.
//
// Like package engine it is pure: no client-go, no I/O. The library calls
// that read a cluster (resource, http, globalContext, image.GetMetadata) go
// through the Data interface.
package cel
