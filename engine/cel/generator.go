package cel

import (
	"context"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Generator receives what a GeneratingPolicy's generator.Apply calls
// generate: the objects (a list object stands for its items) to create in
// a namespace ("" for cluster-scoped ones).
type Generator interface {
	Generate(ctx context.Context, namespace string, objs []map[string]any) error
}

// varGenerator is the variable Kyverno's generator library is called on.
const varGenerator = "generator"

var generatorLibType = types.NewOpaqueType("kyverno.generator")

type generatorLib = libValue[Generator]

// generatorLibrary declares `generator` and its Apply member (both
// spellings): generator.Apply(namespace, objects) for a cluster-wide
// policy, generator.Apply(objects) for a namespaced one (its own
// namespace). Apply gives true once the objects are handed over.
func generatorLibrary(namespaced bool) []celgo.EnvOption {
	opts := []celgo.EnvOption{celgo.Variable(varGenerator, generatorLibType)}
	objects := celgo.ListType(celgo.MapType(celgo.StringType, celgo.DynType))
	for _, name := range []string{"apply", "Apply"} {
		call := func(args ...ref.Val) ref.Val {
			g, ok := args[0].(generatorLib)
			if !ok {
				return types.MaybeNoSuchOverloadErr(args[0])
			}
			namespace, list := "", args[1]
			if len(args) == 3 {
				ns, ok := args[1].Value().(string)
				if !ok {
					return types.MaybeNoSuchOverloadErr(args[1])
				}
				namespace, list = ns, args[2]
			}
			native, err := Native(list)
			if err != nil {
				return types.NewErr("generator.%s: %v", name, err)
			}
			items, _ := native.([]any)
			objs := make([]map[string]any, 0, len(items))
			for i, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return types.NewErr("generator.%s: element %d is not an object", name, i)
				}
				objs = append(objs, m)
			}
			if g.data == nil {
				return types.NewErr("failed to generate resources: generator.%s: tally generates in the CLI only", name)
			}
			if err := g.data.Generate(g.ctx, namespace, objs); err != nil {
				return types.NewErr("failed to generate resources: %v", err)
			}
			return types.True
		}
		if namespaced {
			opts = append(opts, celgo.Function(name, celgo.MemberOverload("generator_"+name+"_list", []*celgo.Type{generatorLibType, objects}, celgo.BoolType, celgo.FunctionBinding(call))))
		} else {
			opts = append(opts, celgo.Function(name, celgo.MemberOverload("generator_"+name+"_string_list", []*celgo.Type{generatorLibType, celgo.StringType, objects}, celgo.BoolType, celgo.FunctionBinding(call))))
		}
	}
	return opts
}
