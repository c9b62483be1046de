package cel

import (
	"fmt"
	"sync"

	celgo "github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// Mode is the environment an expression is compiled in.
type Mode int

const (
	// ModeKubernetes is the ValidatingAdmissionPolicy environment, used by
	// validate.cel rules and ValidatingAdmissionPolicies: the API server's
	// libraries and variables, nothing of Kyverno's.
	ModeKubernetes Mode = iota
	// ModeKyverno is the environment of Kyverno's ValidatingPolicies: the
	// Kubernetes one without params, plus `exceptions` and Kyverno's libraries.
	ModeKyverno
	// ModeImage is the environment of ImageValidatingPolicies: ModeKyverno's,
	// plus `images`, `attestors`, `attestations` and the image verification
	// functions (R42).
	ModeImage
	// ModeGenerate is the environment of GeneratingPolicies: ModeKyverno's,
	// plus `generator`.
	ModeGenerate
	// ModeEnvoy and ModeHTTP are the environments of ValidatingPolicies that
	// authorize requests (spec.evaluation.mode Envoy or HTTP): ModeKyverno's,
	// plus the envoy (or http) authorization functions and jwt; their
	// validations answer with a response or null (Program.Authorize).
	ModeEnvoy
	ModeHTTP
)

func (m Mode) String() string {
	switch m {
	case ModeKyverno:
		return "kyverno"
	case ModeImage:
		return "image"
	case ModeGenerate:
		return "generate"
	case ModeEnvoy:
		return "envoy"
	case ModeHTTP:
		return "http"
	}
	return "kubernetes"
}

// kyverno reports whether the mode has Kyverno's variables and libraries.
func (m Mode) kyverno() bool {
	return m == ModeKyverno || m == ModeImage || m == ModeGenerate || m.authz()
}

// authz reports whether the mode's validations answer authorization requests.
func (m Mode) authz() bool { return m == ModeEnvoy || m == ModeHTTP }

// Names of the variables an expression may read.
const (
	varObject     = plugincel.ObjectVarName
	varOldObject  = plugincel.OldObjectVarName
	varRequest    = plugincel.RequestVarName
	varNamespace  = plugincel.NamespaceVarName
	varParams     = plugincel.ParamsVarName
	varVariables  = plugincel.VariableVarName
	varExceptions = "exceptions"
)

type envKey struct {
	mode      Mode
	hasParams bool
	// namespaced declares the resource library of a namespaced policy.
	namespaced bool
}

var (
	envMu   sync.Mutex
	envSets = map[envKey]*environment.EnvSet{}
)

// envSet returns the environment of a mode, built once: the API server's
// base environment at its default compatibility version, with the
// admission variables declared as the API server declares them.
func envSet(key envKey) (*environment.EnvSet, error) {
	envMu.Lock()
	defer envMu.Unlock()
	if e, ok := envSets[key]; ok {
		return e, nil
	}
	requestType := plugincel.BuildRequestType()
	namespaceType := plugincel.BuildNamespaceType()
	opts := []celgo.EnvOption{
		celgo.Variable(varObject, celgo.DynType),
		celgo.Variable(varOldObject, celgo.DynType),
		celgo.Variable(varNamespace, namespaceType.CelType()),
		celgo.Variable(varRequest, requestType.CelType()),
	}
	if key.hasParams && key.mode == ModeKubernetes {
		opts = append(opts, celgo.Variable(varParams, celgo.DynType))
	}
	if key.mode.kyverno() {
		opts = append(opts, celgo.Variable(varExceptions, celgo.MapType(celgo.StringType, celgo.ListType(celgo.StringType))))
		opts = append(opts, kyvernoLibraries(key.namespaced)...)
	}
	if key.mode == ModeImage {
		opts = append(opts, imageVerifyLibrary()...)
	}
	if key.mode == ModeGenerate {
		opts = append(opts, generatorLibrary(key.namespaced)...)
	}
	switch key.mode {
	case ModeEnvoy:
		opts = append(opts, envoyLibrary()...)
		opts = append(opts, jwtLibrary()...)
	case ModeHTTP:
		opts = append(opts, httpAuthzLibrary()...)
		opts = append(opts, jwtLibrary()...)
	}
	e, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(
		environment.VersionedOptions{
			// Present in every version, as the API server's own admission variables.
			IntroducedVersion: version.MajorMinor(1, 0),
			EnvOptions:        opts,
			DeclTypes:         []*apiservercel.DeclType{namespaceType, requestType},
		},
		environment.StrictCostOpt,
	)
	if err != nil {
		return nil, fmt.Errorf("cel environment (%s): %w", key.mode, err)
	}
	envSets[key] = e
	return e, nil
}
