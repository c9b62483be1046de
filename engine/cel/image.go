package cel

import (
	"fmt"
	"reflect"

	"github.com/distribution/reference"
	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// imageType is the CEL type of a parsed image reference.
var imageType = celgo.OpaqueType("kyverno.image.Image")

// imageValue is an image reference parsed as a container runtime parses
// it: a name without registry is on docker.io, one without path under
// library/.
type imageValue struct {
	named reference.Named
}

func (i imageValue) ConvertToNative(t reflect.Type) (any, error) {
	if t.Kind() == reflect.String {
		return i.named.String(), nil
	}
	return nil, fmt.Errorf("image: no conversion to %v", t)
}

func (i imageValue) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.StringType:
		return types.String(i.named.String())
	case types.TypeType:
		return imageType
	}
	return types.NewErr("image: no conversion to %v", t)
}

func (i imageValue) Equal(other ref.Val) ref.Val {
	o, ok := other.(imageValue)
	return types.Bool(ok && o.named.String() == i.named.String())
}

func (i imageValue) Type() ref.Type { return imageType }
func (i imageValue) Value() any     { return i.named }

func (i imageValue) tag() string {
	if t, ok := i.named.(reference.Tagged); ok {
		return t.Tag()
	}
	return ""
}

func (i imageValue) digest() string {
	if d, ok := i.named.(reference.Digested); ok {
		return d.Digest().String()
	}
	return ""
}

func parseImage(v ref.Val) ref.Val {
	s, ok := v.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(v)
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return types.NewErr("invalid image reference %q: %v", s, err)
	}
	return imageValue{named: named}
}

// imageLibrary is Kyverno's image parsing: image(s) and
// parseImageReference(s) parse, isImage(s) tells whether s parses; on an
// image, registry(), repository(), tag(), digest(), identifier() (the
// digest, else the tag) and containsDigest().
func imageLibrary() []celgo.EnvOption {
	opts := []celgo.EnvOption{
		celgo.Function("image", celgo.Overload("image_string", []*celgo.Type{celgo.StringType}, imageType, celgo.UnaryBinding(parseImage))),
		celgo.Function("parseImageReference", celgo.Overload("parseImageReference_string", []*celgo.Type{celgo.StringType}, imageType, celgo.UnaryBinding(parseImage))),
		celgo.Function("isImage", celgo.Overload("isImage_string", []*celgo.Type{celgo.StringType}, celgo.BoolType, celgo.UnaryBinding(func(v ref.Val) ref.Val {
			return types.Bool(!types.IsError(parseImage(v)))
		}))),
	}
	member := func(name string, result *celgo.Type, fn func(imageValue) ref.Val) {
		opts = append(opts, celgo.Function(name, celgo.MemberOverload("image_"+name, []*celgo.Type{imageType}, result,
			celgo.UnaryBinding(func(v ref.Val) ref.Val {
				img, ok := v.(imageValue)
				if !ok {
					return types.MaybeNoSuchOverloadErr(v)
				}
				return fn(img)
			}))))
	}
	member("registry", celgo.StringType, func(i imageValue) ref.Val { return types.String(reference.Domain(i.named)) })
	member("repository", celgo.StringType, func(i imageValue) ref.Val { return types.String(reference.Path(i.named)) })
	member("tag", celgo.StringType, func(i imageValue) ref.Val { return types.String(i.tag()) })
	member("digest", celgo.StringType, func(i imageValue) ref.Val { return types.String(i.digest()) })
	member("identifier", celgo.StringType, func(i imageValue) ref.Val {
		if d := i.digest(); d != "" {
			return types.String(d)
		}
		return types.String(i.tag())
	})
	member("containsDigest", celgo.BoolType, func(i imageValue) ref.Val { return types.Bool(i.digest() != "") })
	return opts
}
