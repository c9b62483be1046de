package cel

import (
	"context"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// ImageData serves Kyverno's image.GetMetadata: an image's metadata read
// from its registry (in a cluster, when registry access is on) or from a
// context file (offline). A ClusterData that implements it serves it.
type ImageData interface {
	ImageMetadata(ctx context.Context, ref string, secrets []string, insecure bool) (map[string]any, error)
}

// varImage is the variable image.GetMetadata is called on (image(...)
// itself stays the image-parsing function).
const varImage = "image"

var imageLibType = types.NewOpaqueType("kyverno.image")

// imageLib is the value of `image` in one evaluation.
type imageLib = libValue[ImageData]

// imageDataLibrary declares `image` and its GetMetadata member (both
// spellings).
func imageDataLibrary() []celgo.EnvOption {
	opts := []celgo.EnvOption{celgo.Variable(varImage, imageLibType)}
	for _, name := range []string{"getMetadata", "GetMetadata"} {
		opts = append(opts, celgo.Function(name, celgo.MemberOverload("image_"+name+"_1", []*celgo.Type{imageLibType, celgo.StringType}, celgo.DynType,
			celgo.BinaryBinding(func(lib, arg ref.Val) ref.Val {
				i, ok := lib.(imageLib)
				if !ok {
					return types.MaybeNoSuchOverloadErr(lib)
				}
				s, ok := arg.Value().(string)
				if !ok {
					return types.MaybeNoSuchOverloadErr(arg)
				}
				if i.data == nil {
					return types.NewErr("image.%s(%s): no image data: tally reads registries in a cluster, or images of a context file", name, s)
				}
				md, err := i.data.ImageMetadata(i.ctx, s, nil, false)
				if err != nil {
					return types.NewErr("image.%s(%s): %v", name, s, err)
				}
				return types.DefaultTypeAdapter.NativeToValue(Normalize(md))
			}))))
	}
	return opts
}
