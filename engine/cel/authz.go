package cel

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"reflect"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// The authorization modes of a ValidatingPolicy (spec.evaluation.mode
// Envoy or HTTP): its validations answer an authorization request with a
// response, or null to leave it to the next. The functions are those of
// Kyverno's authorization server (kyverno-authz, read for their names,
// arguments and results): envoy.Allowed(), envoy.Denied(code) and their
// builders, http.Allowed(), http.Denied(reason), jwt.Decode.

// Types of the values the authorization functions build.
var (
	envoyOkType        = types.NewObjectType("envoy.OkHttpResponse")
	envoyDeniedType    = types.NewObjectType("envoy.DeniedHttpResponse")
	envoyResponseType  = types.NewObjectType("envoy.service.auth.v3.CheckResponse")
	envoyHeaderType    = types.NewObjectType("envoy.config.core.v3.HeaderValueOption")
	envoyQueryType     = types.NewObjectType("envoy.config.core.v3.QueryParameter")
	httpOkType         = types.NewObjectType("http.CheckResponseOk")
	httpDeniedType     = types.NewObjectType("http.CheckResponseDenied")
	httpResponseType   = types.NewObjectType("http.CheckResponse")
	jwtTokenType       = types.NewObjectType("jwt.Token")
	authzResponseTypes = []*types.Type{envoyResponseType, httpResponseType}
)

// authzValue is a value of one of those types: its fields, JSON-shaped.
type authzValue struct {
	typ    *types.Type
	fields map[string]any
}

func (v *authzValue) ConvertToNative(t reflect.Type) (any, error) {
	if t.Kind() == reflect.Map || t.Kind() == reflect.Interface {
		return v.fields, nil
	}
	return nil, fmt.Errorf("%s cannot be converted to %v", v.typ, t)
}

func (v *authzValue) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return v.typ
	}
	return types.NewErr("type conversion error from %s to %s", v.typ, t)
}

func (v *authzValue) Equal(other ref.Val) ref.Val {
	o, ok := other.(*authzValue)
	return types.Bool(ok && o.typ == v.typ && reflect.DeepEqual(o.fields, v.fields))
}

func (v *authzValue) Type() ref.Type { return v.typ }
func (v *authzValue) Value() any     { return v.fields }

// Get serves field selection (token.Claims, token.Valid).
func (v *authzValue) Get(key ref.Val) ref.Val {
	k, ok := key.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key)
	}
	f, ok := v.fields[k]
	if !ok {
		return types.NewErr("no such key: %s", k)
	}
	return types.DefaultTypeAdapter.NativeToValue(f)
}

// IsSet serves has(token.Claims).
func (v *authzValue) IsSet(field ref.Val) ref.Val {
	k, ok := field.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(field)
	}
	_, set := v.fields[k]
	return types.Bool(set)
}

// with is a copy of v with a field changed by change (on a copy of it).
func (v *authzValue) with(change func(fields map[string]any)) *authzValue {
	out := &authzValue{typ: v.typ, fields: make(map[string]any, len(v.fields)+1)}
	for k, f := range v.fields {
		if l, ok := f.([]any); ok {
			f = slices.Clone(l)
		}
		out.fields[k] = f
	}
	change(out.fields)
	return out
}

func appendTo(fields map[string]any, key string, item any) {
	l, _ := fields[key].([]any)
	fields[key] = append(l, item)
}

// authzArgs reads a call's arguments: the receiver (when of typ) and strings.
func authzArgs(typ *types.Type, args []ref.Val) (*authzValue, []string, ref.Val) {
	var recv *authzValue
	if typ != nil {
		r, ok := args[0].(*authzValue)
		if !ok || r.typ != typ {
			return nil, nil, types.MaybeNoSuchOverloadErr(args[0])
		}
		recv, args = r, args[1:]
	}
	var strs []string
	for _, a := range args {
		if _, built := a.(*authzValue); built {
			continue // a header or query parameter built before: the caller reads it
		}
		s, ok := a.Value().(string)
		if !ok {
			return nil, nil, types.MaybeNoSuchOverloadErr(a)
		}
		strs = append(strs, s)
	}
	return recv, strs, nil
}

func header(key, value string) *authzValue {
	return &authzValue{typ: envoyHeaderType, fields: map[string]any{"header": map[string]any{"key": key, "value": value}}}
}

// envoyLibrary declares the envoy functions.
func envoyLibrary() []celgo.EnvOption {
	str, boolT := celgo.StringType, celgo.BoolType
	fn := func(id string, args []*celgo.Type, result *celgo.Type, member bool, impl func(args ...ref.Val) ref.Val) celgo.FunctionOpt {
		if member {
			return celgo.MemberOverload(id, args, result, celgo.FunctionBinding(impl))
		}
		return celgo.Overload(id, args, result, celgo.FunctionBinding(impl))
	}
	// builder adds a header (or a query parameter) to a list field of the
	// receiver, from a built value or a key and a value.
	builder := func(recvType *types.Type, field string, item func(k, v string) *authzValue) func(args ...ref.Val) ref.Val {
		return func(args ...ref.Val) ref.Val {
			recv, strs, bad := authzArgs(recvType, args)
			if bad != nil {
				return bad
			}
			var it any
			if len(strs) == 2 {
				it = item(strs[0], strs[1]).fields
			} else if o, ok := args[1].(*authzValue); ok {
				it = o.fields
			} else {
				return types.MaybeNoSuchOverloadErr(args[1])
			}
			return recv.with(func(f map[string]any) { appendTo(f, field, it) })
		}
	}
	query := func(k, v string) *authzValue {
		return &authzValue{typ: envoyQueryType, fields: map[string]any{"key": k, "value": v}}
	}
	remove := func(recvType *types.Type, field string) func(args ...ref.Val) ref.Val {
		return func(args ...ref.Val) ref.Val {
			recv, strs, bad := authzArgs(recvType, args)
			if bad != nil {
				return bad
			}
			return recv.with(func(f map[string]any) { appendTo(f, field, strs[0]) })
		}
	}
	response := func(recvType *types.Type, field string) func(args ...ref.Val) ref.Val {
		return func(args ...ref.Val) ref.Val {
			recv, _, bad := authzArgs(recvType, args)
			if bad != nil {
				return bad
			}
			return &authzValue{typ: envoyResponseType, fields: map[string]any{field: recv.fields}}
		}
	}
	return []celgo.EnvOption{
		celgo.Function("envoy.Allowed", fn("envoy_allowed", nil, envoyOkType, false, func(...ref.Val) ref.Val {
			return &authzValue{typ: envoyOkType, fields: map[string]any{}}
		})),
		celgo.Function("envoy.Denied", fn("envoy_denied_int", []*celgo.Type{celgo.IntType}, envoyDeniedType, false, func(args ...ref.Val) ref.Val {
			code, ok := args[0].Value().(int64)
			if !ok {
				return types.MaybeNoSuchOverloadErr(args[0])
			}
			return &authzValue{typ: envoyDeniedType, fields: map[string]any{"status": map[string]any{"code": code}}}
		})),
		celgo.Function("envoy.Header", fn("envoy_header_string_string", []*celgo.Type{str, str}, envoyHeaderType, false, func(args ...ref.Val) ref.Val {
			_, s, bad := authzArgs(nil, args)
			if bad != nil {
				return bad
			}
			return header(s[0], s[1])
		})),
		celgo.Function("envoy.QueryParam", fn("envoy_queryparam_string_string", []*celgo.Type{str, str}, envoyQueryType, false, func(args ...ref.Val) ref.Val {
			_, s, bad := authzArgs(nil, args)
			if bad != nil {
				return bad
			}
			return query(s[0], s[1])
		})),
		celgo.Function("WithBody", fn("envoy_denied_with_body", []*celgo.Type{envoyDeniedType, str}, envoyDeniedType, true, func(args ...ref.Val) ref.Val {
			recv, s, bad := authzArgs(envoyDeniedType, args)
			if bad != nil {
				return bad
			}
			return recv.with(func(f map[string]any) { f["body"] = s[0] })
		})),
		celgo.Function("WithHeader",
			fn("envoy_ok_with_header", []*celgo.Type{envoyOkType, envoyHeaderType}, envoyOkType, true, builder(envoyOkType, "headers", header)),
			fn("envoy_ok_with_header_string_string", []*celgo.Type{envoyOkType, str, str}, envoyOkType, true, builder(envoyOkType, "headers", header)),
			fn("envoy_denied_with_header", []*celgo.Type{envoyDeniedType, envoyHeaderType}, envoyDeniedType, true, builder(envoyDeniedType, "headers", header)),
			fn("envoy_denied_with_header_string_string", []*celgo.Type{envoyDeniedType, str, str}, envoyDeniedType, true, builder(envoyDeniedType, "headers", header)),
		),
		celgo.Function("WithoutHeader", fn("envoy_ok_without_header", []*celgo.Type{envoyOkType, str}, envoyOkType, true, remove(envoyOkType, "headersToRemove"))),
		celgo.Function("WithResponseHeader",
			fn("envoy_ok_with_response_header", []*celgo.Type{envoyOkType, envoyHeaderType}, envoyOkType, true, builder(envoyOkType, "responseHeadersToAdd", header)),
			fn("envoy_ok_with_response_header_string_string", []*celgo.Type{envoyOkType, str, str}, envoyOkType, true, builder(envoyOkType, "responseHeadersToAdd", header)),
		),
		celgo.Function("WithQueryParam",
			fn("envoy_ok_with_queryparam", []*celgo.Type{envoyOkType, envoyQueryType}, envoyOkType, true, builder(envoyOkType, "queryParametersToSet", query)),
			fn("envoy_ok_with_queryparam_string_string", []*celgo.Type{envoyOkType, str, str}, envoyOkType, true, builder(envoyOkType, "queryParametersToSet", query)),
		),
		celgo.Function("WithoutQueryParam", fn("envoy_ok_without_queryparam", []*celgo.Type{envoyOkType, str}, envoyOkType, true, remove(envoyOkType, "queryParametersToRemove"))),
		celgo.Function("KeepEmptyValue",
			fn("envoy_header_keep_empty_value", []*celgo.Type{envoyHeaderType}, envoyHeaderType, true, func(args ...ref.Val) ref.Val {
				recv, _, bad := authzArgs(envoyHeaderType, args)
				if bad != nil {
					return bad
				}
				return recv.with(func(f map[string]any) { f["keepEmptyValue"] = true })
			}),
			fn("envoy_header_keep_empty_value_bool", []*celgo.Type{envoyHeaderType, boolT}, envoyHeaderType, true, func(args ...ref.Val) ref.Val {
				recv, _, bad := authzArgs(envoyHeaderType, args[:1])
				if bad != nil {
					return bad
				}
				keep, ok := args[1].Value().(bool)
				if !ok {
					return types.MaybeNoSuchOverloadErr(args[1])
				}
				return recv.with(func(f map[string]any) { f["keepEmptyValue"] = keep })
			}),
		),
		celgo.Function("Response",
			fn("envoy_ok_response", []*celgo.Type{envoyOkType}, envoyResponseType, true, response(envoyOkType, "okResponse")),
			fn("envoy_denied_response", []*celgo.Type{envoyDeniedType}, envoyResponseType, true, response(envoyDeniedType, "deniedResponse")),
		),
		celgo.Function("WithMessage", fn("envoy_response_with_message", []*celgo.Type{envoyResponseType, str}, envoyResponseType, true, func(args ...ref.Val) ref.Val {
			recv, s, bad := authzArgs(envoyResponseType, args)
			if bad != nil {
				return bad
			}
			return recv.with(func(f map[string]any) { f["message"] = s[0] })
		})),
		celgo.Function("WithMetadata", fn("envoy_response_with_metadata", []*celgo.Type{envoyResponseType, celgo.MapType(str, celgo.DynType)}, envoyResponseType, true, func(args ...ref.Val) ref.Val {
			recv, _, bad := authzArgs(envoyResponseType, args[:1])
			if bad != nil {
				return bad
			}
			md, err := Native(args[1])
			if err != nil {
				return types.WrapErr(err)
			}
			return recv.with(func(f map[string]any) { f["dynamicMetadata"] = md })
		})),
	}
}

// httpAuthzLibrary declares the http authorization functions.
func httpAuthzLibrary() []celgo.EnvOption {
	str := celgo.StringType
	values := func(field string, canonical bool) func(args ...ref.Val) ref.Val {
		return func(args ...ref.Val) ref.Val {
			attrs, ok := args[0].(traits.Mapper)
			if !ok {
				return types.MaybeNoSuchOverloadErr(args[0])
			}
			key, ok := args[1].Value().(string)
			if !ok {
				return types.MaybeNoSuchOverloadErr(args[1])
			}
			m, found := attrs.Find(types.String(field))
			if !found {
				return types.DefaultTypeAdapter.NativeToValue([]string{})
			}
			native, err := Native(m)
			if err != nil {
				return types.WrapErr(err)
			}
			byKey, _ := native.(map[string]any)
			var out []string
			for k, v := range byKey {
				if k != key && !(canonical && textproto.CanonicalMIMEHeaderKey(k) == textproto.CanonicalMIMEHeaderKey(key)) {
					continue
				}
				l, _ := v.([]any)
				for _, s := range l {
					if s, ok := s.(string); ok {
						out = append(out, s)
					}
				}
			}
			if out == nil {
				out = []string{}
			}
			return types.DefaultTypeAdapter.NativeToValue(out)
		}
	}
	response := func(recvType *types.Type, field string) func(args ...ref.Val) ref.Val {
		return func(args ...ref.Val) ref.Val {
			recv, _, bad := authzArgs(recvType, args)
			if bad != nil {
				return bad
			}
			return &authzValue{typ: httpResponseType, fields: map[string]any{field: recv.fields}}
		}
	}
	return []celgo.EnvOption{
		celgo.Function("http.Allowed", celgo.Overload("http_authz_allowed", nil, httpOkType, celgo.FunctionBinding(func(...ref.Val) ref.Val {
			return &authzValue{typ: httpOkType, fields: map[string]any{}}
		}))),
		celgo.Function("http.Denied", celgo.Overload("http_authz_denied_string", []*celgo.Type{str}, httpDeniedType, celgo.UnaryBinding(func(reason ref.Val) ref.Val {
			s, ok := reason.Value().(string)
			if !ok {
				return types.MaybeNoSuchOverloadErr(reason)
			}
			return &authzValue{typ: httpDeniedType, fields: map[string]any{"reason": s}}
		}))),
		// The request's attributes are a map here (the payload as read):
		// Header and QueryParam take it as such.
		celgo.Function("Header", celgo.MemberOverload("http_authz_header_string", []*celgo.Type{celgo.DynType, str}, celgo.ListType(str), celgo.FunctionBinding(values("header", true)))),
		celgo.Function("QueryParam", celgo.MemberOverload("http_authz_queryparam_string", []*celgo.Type{celgo.DynType, str}, celgo.ListType(str), celgo.FunctionBinding(values("query", false)))),
		celgo.Function("Response",
			celgo.MemberOverload("http_authz_ok_response", []*celgo.Type{httpOkType}, httpResponseType, celgo.FunctionBinding(response(httpOkType, "ok"))),
			celgo.MemberOverload("http_authz_denied_response", []*celgo.Type{httpDeniedType}, httpResponseType, celgo.FunctionBinding(response(httpDeniedType, "denied"))),
		),
	}
}

// jwtLibrary declares jwt.Decode(token, key): the token's claims (exp,
// nbf and iat as Unix seconds) and whether they are valid now; a token
// whose HMAC signature the key does not verify is an error, as Kyverno's.
func jwtLibrary() []celgo.EnvOption {
	return []celgo.EnvOption{
		celgo.Function("jwt.Decode", celgo.Overload("jwt_decode_string_string", []*celgo.Type{celgo.StringType, celgo.StringType}, jwtTokenType,
			celgo.BinaryBinding(func(token, key ref.Val) ref.Val {
				t, ok := token.Value().(string)
				if !ok {
					return types.MaybeNoSuchOverloadErr(token)
				}
				k, ok := key.Value().(string)
				if !ok {
					return types.MaybeNoSuchOverloadErr(key)
				}
				return decodeJWT(t, []byte(k))
			}))),
	}
}

func decodeJWT(token string, key []byte) ref.Val {
	claims := jwt.MapClaims{}
	_, err := jwt.NewParser(jwt.WithValidMethods([]string{"HS256", "HS384", "HS512"}), jwt.WithoutClaimsValidation()).
		ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return key, nil })
	if err != nil {
		return types.NewErr("jwt.Decode: %v", err)
	}
	fields := make(map[string]any, len(claims))
	for k, v := range claims {
		if f, ok := v.(float64); ok && (k == "exp" || k == "nbf" || k == "iat") {
			v = int64(f)
		}
		fields[k] = v
	}
	valid := jwt.NewValidator(jwt.WithTimeFunc(time.Now)).Validate(claims) == nil
	return &authzValue{typ: jwtTokenType, fields: map[string]any{"Claims": fields, "Valid": valid}}
}

// AuthzDecision is what an Envoy or HTTP policy decided on a request.
type AuthzDecision struct {
	// Answered is set when a validation gave a response (none: the policy
	// leaves the request alone).
	Answered bool
	Allowed  bool
	// Status is an Envoy denial's status code, Reason an HTTP denial's.
	Status int64
	Reason string
	// Response is the response as the validation built it.
	Response map[string]any
}

// Authorize evaluates an authorization policy (ModeEnvoy or ModeHTTP) on
// a request (in.Object): its match conditions, then its validations in
// order until one gives a response.
func (p *Program) Authorize(ctx context.Context, in *Input) (AuthzDecision, error) {
	if p.mode != ModeEnvoy && p.mode != ModeHTTP {
		return AuthzDecision{}, fmt.Errorf("not an authorization policy (mode %s)", p.mode)
	}
	a := p.activation(ctx, in)
	if notMet, err := a.conditions(); notMet || err != nil {
		return AuthzDecision{}, err
	}
	for _, val := range p.validations {
		v, err := a.eval(val.check)
		if err != nil {
			return AuthzDecision{}, err
		}
		if v == types.NullValue {
			continue
		}
		r, ok := v.(*authzValue)
		if !ok || !slices.Contains(authzResponseTypes, r.typ) {
			return AuthzDecision{}, fmt.Errorf("validation %q gave %v, not a response", val.check.text, v.Type())
		}
		d := AuthzDecision{Answered: true, Response: r.fields}
		switch {
		case r.fields["okResponse"] != nil || r.fields["ok"] != nil:
			d.Allowed = true
		case r.fields["deniedResponse"] != nil:
			denied, _ := r.fields["deniedResponse"].(map[string]any)
			status, _ := denied["status"].(map[string]any)
			d.Status, _ = status["code"].(int64)
		case r.fields["denied"] != nil:
			denied, _ := r.fields["denied"].(map[string]any)
			d.Reason, _ = denied["reason"].(string)
		default:
			return AuthzDecision{}, errors.New("a response that neither allows nor denies")
		}
		return d, nil
	}
	return AuthzDecision{}, nil
}
