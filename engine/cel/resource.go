package cel

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	apipath "k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
)

// ClusterData serves Kyverno's `resource` library to ValidatingPolicies:
// objects of the cluster, read by apiVersion, resource (plural), namespace
// ("" for a cluster-scoped kind) and name. In a cluster it is the data
// loader's (its caches and RBAC); offline there is none and the calls are
// errors naming themselves.
type ClusterData interface {
	GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error)
	// ListResources returns a list object ({"items": [...]}).
	ListResources(ctx context.Context, apiVersion, resource, namespace string) (map[string]any, error)
}

// varResource is the variable Kyverno's resource library is called on.
const varResource = "resource"

var resourceLibType = types.NewOpaqueType("kyverno.resource")

// resourceLib is the value of `resource` in one evaluation.
type resourceLib struct {
	ctx  context.Context
	data ClusterData
	// ownNamespace: see Input.OwnNamespace.
	ownNamespace string
}

func (r resourceLib) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("%s cannot be converted to %v", resourceLibType, t)
}
func (r resourceLib) ConvertToType(t ref.Type) ref.Val {
	return types.NewErr("type conversion error from %s to %s", resourceLibType, t)
}
func (r resourceLib) Equal(other ref.Val) ref.Val { return types.Bool(false) }
func (r resourceLib) Type() ref.Type              { return resourceLibType }
func (r resourceLib) Value() any                  { return r }

// resourceLibrary declares `resource` and its Get and List members (each
// spelled both ways, as Kyverno's): for a cluster-wide policy
// Get(apiVersion, resource, namespace, name) and List(apiVersion, resource,
// namespace); for a namespaced one (namespaced) Get(apiVersion, resource,
// name) and List(apiVersion, resource), the namespace being the policy's
// own, as Kyverno's sdk declares them (a call with a namespace does not
// compile there).
func resourceLibrary(namespaced bool) []celgo.EnvOption {
	opts := []celgo.EnvOption{celgo.Variable(varResource, resourceLibType)}
	str := celgo.StringType
	get := []*celgo.Type{resourceLibType, str, str, str, str}
	list := []*celgo.Type{resourceLibType, str, str, str}
	suffix := ""
	if namespaced {
		get, list, suffix = get[:4], list[:3], "_namespaced"
	}
	for _, name := range []string{"get", "Get"} {
		opts = append(opts, celgo.Function(name, celgo.MemberOverload("resource_"+name+suffix, get, celgo.DynType,
			celgo.FunctionBinding(func(args ...ref.Val) ref.Val {
				return resourceCall("resource."+name, args, func(r resourceLib, s []string) (map[string]any, error) {
					return r.data.GetResource(r.ctx, s[0], s[1], s[2], s[3])
				})
			}))))
	}
	for _, name := range []string{"list", "List"} {
		opts = append(opts, celgo.Function(name, celgo.MemberOverload("resource_"+name+suffix, list, celgo.DynType,
			celgo.FunctionBinding(func(args ...ref.Val) ref.Val {
				return resourceCall("resource."+name, args, func(r resourceLib, s []string) (map[string]any, error) {
					return r.data.ListResources(r.ctx, s[0], s[1], s[2])
				})
			}))))
	}
	return opts
}

// resourceCall runs a call of the library: its string arguments, the data
// source of the evaluation, the answer as a CEL value or an error.
func resourceCall(name string, args []ref.Val, call func(resourceLib, []string) (map[string]any, error)) ref.Val {
	r, ok := args[0].(resourceLib)
	if !ok {
		return types.MaybeNoSuchOverloadErr(args[0])
	}
	s := make([]string, 0, 4)
	for _, a := range args[1:] {
		v, ok := a.Value().(string)
		if !ok {
			return types.MaybeNoSuchOverloadErr(a)
		}
		s = append(s, v)
	}
	if namespacedCall(name, len(s)) {
		// A namespaced policy's call: its namespace is the third argument.
		if r.ownNamespace == "" {
			return types.NewErr("%s(%s): the policy's namespace is not known (no call made)", name, strings.Join(s, ", "))
		}
		s = append(s[:2], append([]string{r.ownNamespace}, s[2:]...)...)
	}
	if err := resourceArgs(s); err != nil {
		// Each argument becomes a segment of the request's path: one that
		// is not a name (a "/", "..", an escape) could reach another path.
		return types.NewErr("%s(%s): %v (no call made)", name, strings.Join(s, ", "), err)
	}
	if r.ownNamespace != "" && s[2] != r.ownNamespace {
		// R47: checked before anything else, offline too, so that a
		// policy behaves the same wherever it runs.
		return types.NewErr("%s(%s): %s", name, strings.Join(s, ", "), OutsideNamespace(r.ownNamespace, s[2]))
	}
	if r.data == nil {
		return types.NewErr("%s(%s): no cluster data: tally reads it in a cluster only", name, strings.Join(s, ", "))
	}
	obj, err := call(r, s)
	if err != nil {
		return types.NewErr("%s(%s): %v", name, strings.Join(s, ", "), err)
	}
	return types.DefaultTypeAdapter.NativeToValue(Normalize(obj))
}

// namespacedCall says whether a call of n arguments is the namespaced
// form (Get with 3, List with 2).
func namespacedCall(name string, n int) bool {
	if strings.HasSuffix(strings.ToLower(name), ".get") {
		return n == 3
	}
	return n == 2
}

// resourceArgs checks the arguments of resource.Get (apiVersion,
// resource, namespace, name) and resource.List (the first three): each is
// what it names and nothing more, so that the request's path has exactly
// the segments they give.
func resourceArgs(s []string) error {
	gv, err := schema.ParseGroupVersion(s[0])
	if err != nil || gv.Version == "" || len(k8svalidation.IsDNS1035Label(gv.Version)) > 0 ||
		(gv.Group != "" && len(k8svalidation.IsDNS1123Subdomain(gv.Group)) > 0) {
		return fmt.Errorf("apiVersion %q is not a group/version", s[0])
	}
	if len(k8svalidation.IsDNS1123Subdomain(s[1])) > 0 {
		return fmt.Errorf("resource %q is not a resource's plural name", s[1])
	}
	if s[2] != "" && len(k8svalidation.IsDNS1123Label(s[2])) > 0 {
		return fmt.Errorf("namespace %q is not a namespace's name", s[2])
	}
	if len(s) > 3 {
		if msgs := apipath.IsValidPathSegmentName(s[3]); s[3] == "" || len(msgs) > 0 || strings.ContainsAny(s[3], "#?\\ ") {
			return fmt.Errorf("name %q is not an object's name", s[3])
		}
	}
	return nil
}

// OutsideNamespace is the refusal of a read a namespaced policy may not
// make (R47): it reaches only its own namespace.
func OutsideNamespace(own, read string) string {
	where := "namespace " + read
	if read == "" {
		where = "the whole cluster"
	}
	return fmt.Sprintf("a namespaced policy of namespace %s may read only its own namespace, not %s (no call made)", own, where)
}
