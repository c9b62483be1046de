package cel

import (
	"context"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// GlobalData serves Kyverno's globalContext.Get: a GlobalContextEntry's
// data, or one of its projections ("" for the data). policy is the key of
// the policy reading it (PolicyOf), so that a change rescans its readers.
// A ClusterData that implements it serves the library.
type GlobalData interface {
	Global(ctx context.Context, policy, name, projection string) (any, error)
}

type policyKey struct{}

// WithPolicy tells the data a policy's evaluation reads which policy reads
// it (its key for rescans, such as "ValidatingPolicy/x").
func WithPolicy(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, policyKey{}, key)
}

// PolicyOf is the policy WithPolicy named ("" when none).
func PolicyOf(ctx context.Context) string {
	s, _ := ctx.Value(policyKey{}).(string)
	return s
}

// varGlobalContext is the variable globalContext.Get is called on.
const varGlobalContext = "globalContext"

var globalLibType = types.NewOpaqueType("kyverno.globalContext")

// globalLib is the value of `globalContext` in one evaluation.
type globalLib = libValue[GlobalData]

// globalContextLibrary declares `globalContext` and its Get member (both
// spellings), with and without a projection.
func globalContextLibrary() []celgo.EnvOption {
	opts := []celgo.EnvOption{celgo.Variable(varGlobalContext, globalLibType)}
	str := celgo.StringType
	for _, name := range []string{"get", "Get"} {
		call := func(args ...ref.Val) ref.Val {
			g, ok := args[0].(globalLib)
			if !ok {
				return types.MaybeNoSuchOverloadErr(args[0])
			}
			s := make([]string, 2)
			for i, a := range args[1:] {
				v, ok := a.Value().(string)
				if !ok {
					return types.MaybeNoSuchOverloadErr(a)
				}
				s[i] = v
			}
			if g.data == nil {
				return types.NewErr("globalContext.%s(%s): no global context: tally reads GlobalContextEntries in a cluster only", name, s[0])
			}
			v, err := g.data.Global(g.ctx, PolicyOf(g.ctx), s[0], s[1])
			if err != nil {
				return types.NewErr("globalContext.%s(%s): %v", name, s[0], err)
			}
			return types.DefaultTypeAdapter.NativeToValue(Normalize(v))
		}
		opts = append(opts, celgo.Function(name,
			celgo.MemberOverload("globalContext_"+name+"_1", []*celgo.Type{globalLibType, str}, celgo.DynType, celgo.FunctionBinding(call)),
			celgo.MemberOverload("globalContext_"+name+"_2", []*celgo.Type{globalLibType, str, str}, celgo.DynType, celgo.FunctionBinding(call))))
	}
	return opts
}
