package cel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/parser"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// ImageVerification serves an ImageValidatingPolicy's image functions in
// one evaluation (R42): the engine binds it to the policy's attestors and
// attestations, the verifier and the request. Attestors and the attestation
// are named as the policy names them.
type ImageVerification interface {
	// VerifySignatures is how many of the attestors verify the image's
	// signatures; err is a failure to ask (a registry that does not answer).
	VerifySignatures(ctx context.Context, image string, attestors []string) (int, error)
	// VerifyAttestations is how many of the attestors verify the image's
	// attestations of the named attestation's type.
	VerifyAttestations(ctx context.Context, image, attestation string, attestors []string) (int, error)
	// Payload is the predicate of the named attestation, once verified.
	Payload(ctx context.Context, image, attestation string) (any, error)
	// ImageData is the image's metadata, read from its registry.
	ImageData(ctx context.Context, image string) (map[string]any, error)
}

// Variables of ModeImage.
const (
	varImages       = "images"
	varAttestors    = "attestors"
	varAttestations = "attestations"
	// varVerifier is the hidden receiver of the image functions: the
	// functions are called as Kyverno spells them (verifyImageSignatures(...))
	// and parsed as members of it (macros), so that each evaluation's calls
	// reach that evaluation's verification.
	varVerifier = "__tally_imageverify"
)

var imageVerifyLibType = types.NewOpaqueType("tally.imageverify")

type imageVerifyLib = libValue[ImageVerification]

// imageVerifyLibrary declares ModeImage's variables and functions:
// verifyImageSignatures(image, attestors) int,
// verifyAttestationSignatures(image, attestation, attestors) int,
// extractPayload(image, attestation) dyn and getImageData(image) dyn.
func imageVerifyLibrary() []celgo.EnvOption {
	str, dyn := celgo.StringType, celgo.DynType
	list := celgo.ListType(dyn)
	opts := []celgo.EnvOption{
		celgo.Variable(varImages, celgo.MapType(str, celgo.ListType(str))),
		celgo.Variable(varAttestors, celgo.MapType(str, dyn)),
		celgo.Variable(varAttestations, celgo.MapType(str, str)),
		celgo.Variable(varVerifier, imageVerifyLibType),
	}
	var macros []celgo.Macro
	member := func(name string, args []*celgo.Type, result *celgo.Type, fn func(lib imageVerifyLib, args []ref.Val) ref.Val) {
		params := append([]*celgo.Type{imageVerifyLibType}, args...)
		opts = append(opts, celgo.Function(name, celgo.MemberOverload("tally_iv_"+name, params, result,
			celgo.FunctionBinding(func(vals ...ref.Val) ref.Val {
				lib, ok := vals[0].(imageVerifyLib)
				if !ok {
					return types.MaybeNoSuchOverloadErr(vals[0])
				}
				if lib.data == nil {
					return types.NewErr("%s: no image verification: the policy is evaluated without registry access", name)
				}
				return fn(lib, vals[1:])
			}))))
		macros = append(macros, celgo.GlobalMacro(name, len(args), func(eh parser.ExprHelper, _ ast.Expr, margs []ast.Expr) (ast.Expr, *celgo.Error) {
			return eh.NewMemberCall(name, eh.NewIdent(varVerifier), margs...), nil
		}))
	}
	member("verifyImageSignatures", []*celgo.Type{str, list}, celgo.IntType, func(lib imageVerifyLib, a []ref.Val) ref.Val {
		image, attestors, err := imageAndNames(a[0], a[1])
		if err != nil {
			return types.NewErr("verifyImageSignatures: %v", err)
		}
		n, err := lib.data.VerifySignatures(lib.ctx, image, attestors)
		if err != nil {
			return types.NewErr("%v", err)
		}
		return types.Int(n)
	})
	member("verifyAttestationSignatures", []*celgo.Type{str, str, list}, celgo.IntType, func(lib imageVerifyLib, a []ref.Val) ref.Val {
		image, attestors, err := imageAndNames(a[0], a[2])
		if err != nil {
			return types.NewErr("verifyAttestationSignatures: %v", err)
		}
		att, err := nameOf(a[1])
		if err != nil {
			return types.NewErr("verifyAttestationSignatures: attestation: %v", err)
		}
		n, err := lib.data.VerifyAttestations(lib.ctx, image, att, attestors)
		if err != nil {
			return types.NewErr("%v", err)
		}
		return types.Int(n)
	})
	member("extractPayload", []*celgo.Type{str, str}, dyn, func(lib imageVerifyLib, a []ref.Val) ref.Val {
		image, ok := a[0].Value().(string)
		if !ok {
			return types.MaybeNoSuchOverloadErr(a[0])
		}
		att, err := nameOf(a[1])
		if err != nil {
			return types.NewErr("extractPayload: attestation: %v", err)
		}
		p, err := lib.data.Payload(lib.ctx, image, att)
		if err != nil {
			return types.NewErr("%v", err)
		}
		return types.DefaultTypeAdapter.NativeToValue(Normalize(p))
	})
	member("getImageData", []*celgo.Type{str}, dyn, func(lib imageVerifyLib, a []ref.Val) ref.Val {
		image, ok := a[0].Value().(string)
		if !ok {
			return types.MaybeNoSuchOverloadErr(a[0])
		}
		md, err := lib.data.ImageData(lib.ctx, image)
		if err != nil {
			return types.NewErr("getImageData(%s): %v", image, err)
		}
		return types.DefaultTypeAdapter.NativeToValue(Normalize(md))
	})
	return append(opts, celgo.Macros(macros...))
}

// imageAndNames reads an image and a list of attestors.
func imageAndNames(image, list ref.Val) (string, []string, error) {
	s, ok := image.Value().(string)
	if !ok {
		return "", nil, fmt.Errorf("image: want a string, got %s", image.Type().TypeName())
	}
	l, ok := list.(traits.Lister)
	if !ok {
		return "", nil, fmt.Errorf("attestors: want a list, got %s", list.Type().TypeName())
	}
	var names []string
	for it := l.Iterator(); it.HasNext() == types.True; {
		n, err := nameOf(it.Next())
		if err != nil {
			return "", nil, fmt.Errorf("attestors: %w", err)
		}
		names = append(names, n)
	}
	return s, names, nil
}

// nameOf is the name of an attestor or attestation: the value of
// attestors.x or attestations.x (an object with its name), or the name.
func nameOf(v ref.Val) (string, error) {
	if s, ok := v.Value().(string); ok {
		return s, nil
	}
	if m, ok := v.(traits.Mapper); ok {
		if n, found := m.Find(types.String("name")); found {
			if s, ok := n.Value().(string); ok {
				return s, nil
			}
		}
	}
	return "", fmt.Errorf("want attestors.<name> or attestations.<name>, got %s", v.Type().TypeName())
}

// RefMatcher is a compiled matchImageReferences expression: a bool over
// the image reference `ref`, with Kyverno's pure libraries.
type RefMatcher struct{ prog celgo.Program }

var refEnv = sync.OnceValues(func() (*celgo.Env, error) {
	set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        append(pureLibraries(), celgo.Variable("ref", celgo.StringType)),
	})
	if err != nil {
		return nil, err
	}
	return set.Env(environment.StoredExpressions)
})

// CompileRefMatcher compiles a matchImageReferences expression.
func CompileRefMatcher(expression string) (*RefMatcher, error) {
	env, err := refEnv()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	ast, issues := env.Compile(expression)
	if issues != nil && issues.Err() != nil {
		return nil, errors.New("compilation failed: " + issues.String())
	}
	if !ast.OutputType().IsExactType(celgo.BoolType) {
		return nil, fmt.Errorf("must evaluate to bool but got %v", ast.OutputType())
	}
	prog, err := env.Program(ast, celgo.CostLimit(celconfig.PerCallLimit))
	if err != nil {
		return nil, fmt.Errorf("program instantiation failed: %w", err)
	}
	return &RefMatcher{prog: prog}, nil
}

// Matches evaluates the expression on an image reference.
func (m *RefMatcher) Matches(ref string) (bool, error) {
	v, _, err := m.prog.Eval(map[string]any{"ref": ref})
	if err != nil {
		return false, err
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("must evaluate to bool but got %v", v.Type())
	}
	return b, nil
}
