package cel

import (
	"context"
	"fmt"
	"reflect"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// HTTPData serves Kyverno's `http` library (http.Get, http.Post): calls
// to services, as the cluster's data loader allows them. A ClusterData
// that implements it serves the library too; without one the calls are
// errors naming themselves.
type HTTPData interface {
	HTTPCall(ctx context.Context, method, url string, body any, headers map[string]string, caBundle string) (any, error)
}

// varHTTP is the variable Kyverno's http library is called on.
const varHTTP = "http"

var httpLibType = types.NewOpaqueType("kyverno.http")

// libValue is the value of a library variable (`http`, `image`,
// `globalContext`) in one evaluation: the evaluation's context and the data
// serving the library (nil when there is none).
type libValue[D any] struct {
	typ  *types.Type
	ctx  context.Context
	data D
}

func (l libValue[D]) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("%s cannot be converted to %v", l.typ, t)
}
func (l libValue[D]) ConvertToType(t ref.Type) ref.Val {
	return types.NewErr("type conversion error from %s to %s", l.typ, t)
}
func (l libValue[D]) Equal(other ref.Val) ref.Val { return types.Bool(false) }
func (l libValue[D]) Type() ref.Type              { return l.typ }
func (l libValue[D]) Value() any                  { return l }

// httpLib is the value of `http` in one evaluation.
type httpLib = libValue[HTTPData]

// httpLibrary declares `http` and its Get and Post members, each spelled
// both ways, with and without headers.
func httpLibrary() []celgo.EnvOption {
	opts := []celgo.EnvOption{celgo.Variable(varHTTP, httpLibType)}
	dyn, str := celgo.DynType, celgo.StringType
	headers := celgo.MapType(str, str)
	for _, name := range []string{"get", "Get"} {
		opts = append(opts, celgo.Function(name,
			celgo.MemberOverload("http_"+name+"_1", []*celgo.Type{httpLibType, str}, dyn, celgo.FunctionBinding(httpCall("http."+name, "GET"))),
			celgo.MemberOverload("http_"+name+"_2", []*celgo.Type{httpLibType, str, headers}, dyn, celgo.FunctionBinding(httpCall("http."+name, "GET")))))
	}
	for _, name := range []string{"post", "Post"} {
		opts = append(opts, celgo.Function(name,
			celgo.MemberOverload("http_"+name+"_2", []*celgo.Type{httpLibType, str, dyn}, dyn, celgo.FunctionBinding(httpCall("http."+name, "POST"))),
			celgo.MemberOverload("http_"+name+"_3", []*celgo.Type{httpLibType, str, dyn, headers}, dyn, celgo.FunctionBinding(httpCall("http."+name, "POST")))))
	}
	return opts
}

// httpCall binds a member: (http, url[, body][, headers]).
func httpCall(name, method string) func(args ...ref.Val) ref.Val {
	return func(args ...ref.Val) ref.Val {
		h, ok := args[0].(httpLib)
		if !ok {
			return types.MaybeNoSuchOverloadErr(args[0])
		}
		url, ok := args[1].Value().(string)
		if !ok {
			return types.MaybeNoSuchOverloadErr(args[1])
		}
		rest := args[2:]
		var body any
		if method == "POST" {
			b, err := Native(rest[0])
			if err != nil {
				return types.NewErr("%s(%s): body: %v", name, url, err)
			}
			body, rest = b, rest[1:]
		}
		var hdrs map[string]string
		if len(rest) > 0 {
			native, err := rest[0].ConvertToNative(reflect.TypeOf(map[string]string{}))
			if err != nil {
				return types.NewErr("%s(%s): headers: %v", name, url, err)
			}
			hdrs = native.(map[string]string)
		}
		if h.data == nil {
			return types.NewErr("%s(%s): no HTTP access: tally calls services in a cluster only", name, url)
		}
		v, err := h.data.HTTPCall(h.ctx, method, url, body, hdrs, "")
		if err != nil {
			return types.NewErr("%s(%s): %v", name, url, err)
		}
		return types.DefaultTypeAdapter.NativeToValue(Normalize(v))
	}
}
