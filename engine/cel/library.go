package cel

import (
	"crypto/md5"  //nolint:gosec // a library function of Kyverno's, not used for security here
	"crypto/sha1" //nolint:gosec // idem
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"strings"
	"time"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	sigsyaml "sigs.k8s.io/yaml"
)

// kyvernoLibraries are the functions Kyverno adds to a ValidatingPolicy's
// environment: the pure ones (pureLibraries), and the calls that read a
// cluster (resource.*, http.*, globalContext.*, image.GetMetadata), members
// of variables served by the evaluation's data (Input.Data); without it
// they fail with an error naming the call, which the policy's result
// reports.
func kyvernoLibraries(namespaced bool) []celgo.EnvOption {
	opts := pureLibraries()
	opts = append(opts, resourceLibrary(namespaced)...)
	opts = append(opts, httpLibrary()...)
	opts = append(opts, imageDataLibrary()...)
	opts = append(opts, globalContextLibrary()...)
	return opts
}

// pureLibraries are the functions that need no cluster: json, yaml,
// hashes, service account names, image references, time and math.round.
// Kyverno's library version 1.18 spells every member both ways
// (json.unmarshal and json.Unmarshal), and so does tally.
func pureLibraries() []celgo.EnvOption {
	// regex.replace, regex.extract and regex.extractAll: cel-go's regex
	// extension, which Kyverno's base environment declares (version 1).
	opts := []celgo.EnvOption{ext.Regex(ext.RegexVersion(1))}
	// both declares ns.name and ns.Name, each with its own overload ids.
	both := func(ns, name string, overloads func(id string) []celgo.FunctionOpt) {
		for _, n := range []string{name, strings.ToUpper(name[:1]) + name[1:]} {
			opts = append(opts, celgo.Function(ns+"."+n, overloads(ns+"_"+n)...))
		}
	}
	unary := func(arg, result *celgo.Type, fn func(ref.Val) ref.Val) func(string) []celgo.FunctionOpt {
		return func(id string) []celgo.FunctionOpt {
			return []celgo.FunctionOpt{celgo.Overload(id+"_"+arg.String(), []*celgo.Type{arg}, result, celgo.UnaryBinding(fn))}
		}
	}
	both("json", "unmarshal", unary(celgo.StringType, celgo.DynType, jsonUnmarshal))
	both("json", "marshal", unary(celgo.DynType, celgo.StringType, jsonMarshal))
	both("yaml", "parse", unary(celgo.StringType, celgo.DynType, yamlParse))
	for _, h := range []struct {
		name string
		new  func() hash.Hash
	}{{"sha1", sha1.New}, {"sha256", sha256.New}, {"md5", md5.New}} {
		fn := hashOf(h.new)
		opts = append(opts, celgo.Function(h.name, celgo.Overload(h.name+"_string", []*celgo.Type{celgo.StringType}, celgo.StringType, celgo.UnaryBinding(fn))))
		both("hash", h.name, unary(celgo.StringType, celgo.StringType, fn))
	}
	opts = append(opts, imageLibrary()...)
	opts = append(opts, timeLibrary()...)
	opts = append(opts, celgo.Function("math.round", celgo.Overload("math_round_double_int", []*celgo.Type{celgo.DoubleType, celgo.IntType}, celgo.DoubleType,
		celgo.BinaryBinding(roundTo))))
	opts = append(opts, celgo.Function("parseServiceAccount", celgo.Overload("parseServiceAccount_string", []*celgo.Type{celgo.StringType}, celgo.DynType, celgo.UnaryBinding(parseServiceAccount))))
	both("user", "parseServiceAccount", unary(celgo.StringType, celgo.DynType, parseServiceAccount))
	return opts
}

// PureLibraries are Kyverno's CEL functions that read nothing but their
// arguments (json, yaml, hashes, image references, time, math.round,
// parseServiceAccount): what a MutatingPolicy, compiled by Kubernetes'
// own machinery, can call. The ones that read the cluster or the network
// (resource, http, imageData, globalContext) need variables of the
// evaluation that machinery does not bind.
func PureLibraries() []celgo.EnvOption { return pureLibraries() }

func jsonUnmarshal(v ref.Val) ref.Val {
	s, ok := v.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(v)
	}
	var out any
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return types.NewErr("json.unmarshal: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(Normalize(out))
}

func jsonMarshal(v ref.Val) ref.Val {
	native, err := Native(v)
	if err != nil {
		return types.NewErr("json.marshal: %v", err)
	}
	data, err := json.Marshal(native)
	if err != nil {
		return types.NewErr("json.marshal: %v", err)
	}
	return types.String(data)
}

func yamlParse(v ref.Val) ref.Val {
	s, ok := v.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(v)
	}
	var out any
	if err := sigsyaml.Unmarshal([]byte(s), &out); err != nil {
		return types.NewErr("yaml.parse: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(Normalize(out))
}

func hashOf(newHash func() hash.Hash) func(ref.Val) ref.Val {
	return func(v ref.Val) ref.Val {
		s, ok := v.Value().(string)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		h := newHash()
		h.Write([]byte(s))
		return types.String(hex.EncodeToString(h.Sum(nil)))
	}
}

// parseServiceAccount splits "system:serviceaccount:<namespace>:<name>".
func parseServiceAccount(v ref.Val) ref.Val {
	s, ok := v.Value().(string)
	if !ok {
		return types.MaybeNoSuchOverloadErr(v)
	}
	// Kyverno's value is a Go struct: its fields read as Name and Namespace;
	// the lower-case spellings of its documentation work too.
	var ns, name string
	if rest, ok := strings.CutPrefix(s, "system:serviceaccount:"); ok {
		ns, name, _ = strings.Cut(rest, ":")
	}
	out := map[string]any{"name": name, "namespace": ns, "Name": name, "Namespace": ns}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// roundTo rounds a double to a number of decimal places (half away from zero).
func roundTo(v, places ref.Val) ref.Val {
	f, ok1 := v.Value().(float64)
	n, ok2 := places.Value().(int64)
	if !ok1 || !ok2 {
		return types.MaybeNoSuchOverloadErr(v)
	}
	if n < 0 || n > 15 {
		return types.NewErr("math.round: %d decimal places: want 0 to 15", n)
	}
	scale := math.Pow(10, float64(n))
	return types.Double(math.Round(f*scale) / scale)
}

// timeLibrary is time.now(), time.truncate(timestamp, duration) and
// time.toCron(timestamp) ("minute hour day-of-month month day-of-week").
func timeLibrary() []celgo.EnvOption {
	return []celgo.EnvOption{
		celgo.Function("time.now", celgo.Overload("time_now", nil, celgo.TimestampType,
			celgo.FunctionBinding(func(...ref.Val) ref.Val { return types.Timestamp{Time: time.Now().UTC()} }))),
		celgo.Function("time.truncate", celgo.Overload("time_truncate_timestamp_duration", []*celgo.Type{celgo.TimestampType, celgo.DurationType}, celgo.TimestampType,
			celgo.BinaryBinding(func(t, d ref.Val) ref.Val {
				ts, ok1 := t.(types.Timestamp)
				dur, ok2 := d.(types.Duration)
				if !ok1 || !ok2 {
					return types.MaybeNoSuchOverloadErr(t)
				}
				return types.Timestamp{Time: ts.Truncate(dur.Duration)}
			}))),
		celgo.Function("time.toCron", celgo.Overload("time_toCron_timestamp", []*celgo.Type{celgo.TimestampType}, celgo.StringType,
			celgo.UnaryBinding(func(t ref.Val) ref.Val {
				ts, ok := t.(types.Timestamp)
				if !ok {
					return types.MaybeNoSuchOverloadErr(t)
				}
				u := ts.UTC()
				return types.String(fmt.Sprintf("%d %d %d %d %d", u.Minute(), u.Hour(), u.Day(), int(u.Month()), int(u.Weekday())))
			}))),
	}
}
