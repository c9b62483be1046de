package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/variables"
)

// UserInfo is the requesting user of an admission request.
type UserInfo struct {
	Username     string
	UID          string
	Groups       []string
	Extra        map[string][]string
	Roles        []string // "<namespace>:<role>"
	ClusterRoles []string
}

// ValueSource supplies variables that the environment would otherwise load
// (a values file in tests): dotted paths such as "request.object.metadata.name"
// or "dictionary.data.env" mapped to values.
type ValueSource interface {
	// PolicyValues are set before any rule of the policy is evaluated.
	PolicyValues(policy string) map[string]any
	// RuleValues are set before the rule's context entries.
	RuleValues(policy, rule string) map[string]any
	// ForeachValues give, per key, the value of the i-th foreach iteration.
	ForeachValues(policy, rule string) map[string][]any
}

// ContextLoader resolves context entries that read the outside world
// (configMap, apiCall, imageRegistry, globalReference). Offline evaluation
// has none: those variables come from a ValueSource or stay unresolved.
//
// policy is the policy's key ("name" for a ClusterPolicy, "namespace/name"
// for a Policy): a loader may record what each policy read, to rescan its
// resources when that data changes.
type ContextLoader interface {
	Load(ctx context.Context, policy string, entry kyvernov1.ContextEntry, data map[string]any) (any, error)
}

// policyKey is a classic policy's key for a ContextLoader.
func (p *Policy) policyKey() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

// requestData builds the JSON document variables are resolved against.
func (req *Request) data(obj, old map[string]any) map[string]any {
	request := map[string]any{
		"operation": req.operation(),
		"object":    nilIfEmpty(obj),
		"oldObject": nilIfEmpty(old),
	}
	if ns := namespaceOf(obj, old); ns != "" {
		request["namespace"] = ns
	}
	data := map[string]any{"request": request}
	if u := req.UserInfo; u != nil {
		groups := make([]any, len(u.Groups))
		for i, g := range u.Groups {
			groups[i] = g
		}
		request["userInfo"] = map[string]any{"username": u.Username, "uid": u.UID, "groups": groups}
		request["roles"] = toAnyList(u.Roles)
		request["clusterRoles"] = toAnyList(u.ClusterRoles)
		if ns, name, ok := serviceAccount(u.Username); ok {
			data["serviceAccountName"] = name
			data["serviceAccountNamespace"] = ns
		}
	}
	switch imgs, err := imagesOf(obj); {
	case err != nil:
		// Only the variables that read it fail, as in Kyverno: a rule that
		// never reads images is evaluated as usual.
		data["images"] = variables.NewLazy("images", func() (any, error) { return nil, err })
	case imgs != nil:
		data["images"] = imgs
	}
	return data
}

func nilIfEmpty(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

func toAnyList(in []string) []any {
	out := make([]any, len(in))
	for i, s := range in {
		out[i] = s
	}
	return out
}

func serviceAccount(username string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(username, "system:serviceaccount:")
	if !found {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok
}

// setPath sets a dotted path in data, copying every map on the way so that
// shared inputs (the resource) are never modified. A segment may be quoted
// as in JMESPath (request.object.metadata.annotations."example.com/x").
func setPath(data map[string]any, path string, value any) {
	keys := splitPath(path)
	cur := data
	for _, k := range keys[:len(keys)-1] {
		next, _ := cur[k].(map[string]any)
		cp := make(map[string]any, len(next)+1)
		for kk, vv := range next {
			cp[kk] = vv
		}
		cur[k] = cp
		cur = cp
	}
	cur[keys[len(keys)-1]] = value
}

func cloneTop(data map[string]any) map[string]any {
	cp := make(map[string]any, len(data)+4)
	for k, v := range data {
		cp[k] = v
	}
	return cp
}

// loadContext evaluates context entries into data (which the caller owns).
func (e *evaluation) loadContext(entries []kyvernov1.ContextEntry, data map[string]any) error {
	for i := range entries {
		entry := &entries[i]
		switch {
		case entry.Variable != nil:
			v, err := variableValue(entry.Variable, data)
			if err != nil {
				return fmt.Errorf("context entry %s: %w", entry.Name, err)
			}
			setPath(data, entry.Name, v)
		default:
			if _, ok := lookupPath(data, entry.Name); ok {
				continue // supplied by a ValueSource
			}
			if e.req.Loader == nil {
				// Offline with nothing to load it from (no values, no
				// context file): not loaded, as Kyverno's CLI loads no
				// configMap or apiCall entry of its own. The variable is
				// then undefined: a default ("{{ cm.data.x || '' }}")
				// covers it, any other read is an unknown key (issue 40).
				continue
			}
			load := func() (any, error) {
				if err := e.entryAllowed(entry, data); err != nil {
					return nil, err // R47: no call made
				}
				return e.req.Loader.Load(e.ctx, e.policy.policyKey(), *entry, data)
			}
			if !strings.Contains(entry.Name, ".") {
				// Loaded when a variable first reads it, as Kyverno does: a
				// rule whose preconditions do not read it never loads it, and
				// a failed load is the error of the variable that read it.
				data[entry.Name] = variables.NewLazy(entry.Name, load)
				continue
			}
			v, err := load()
			if err != nil {
				return fmt.Errorf("context entry %s: %w", entry.Name, err)
			}
			setPath(data, entry.Name, v)
		}
	}
	return nil
}

// entryAllowed refuses, before any call is made with tally's identity, what
// R47 forbids: an apiCall method other than GET or POST (any policy; the
// CRDs refuse them, this is for policies stored before), and for a
// namespaced Policy a configMap or an apiCall urlPath outside its own
// namespace. External services, global context entries and image
// registries read nothing of the cluster with tally's identity.
func (e *evaluation) entryAllowed(entry *kyvernov1.ContextEntry, data map[string]any) error {
	var sent APIPath
	if c := entry.APICall; c != nil {
		switch c.Method {
		case "", "GET", "POST":
		default:
			return fmt.Errorf("apiCall.method %q is not allowed: GET or POST only (no call made)", c.Method)
		}
		if c.Service == nil {
			p, err := variables.SubstituteString(c.URLPath, data)
			if err != nil {
				return fmt.Errorf("apiCall.urlPath: %w", err)
			}
			// What is sent is what is checked, for every policy.
			if sent, err = ParseAPIPath(p); err != nil {
				return fmt.Errorf("apiCall.%w (no call made)", err)
			}
		}
	}
	own := e.policy.Namespace
	if own == "" {
		return nil
	}
	switch {
	case entry.ConfigMap != nil:
		ns, name, err := ConfigMapOf(entry.ConfigMap, data)
		if err != nil {
			return err
		}
		if ns != own {
			return fmt.Errorf("configMap %s/%s: %s", ns, name, cel.OutsideNamespace(own, ns))
		}
	case entry.APICall != nil && entry.APICall.Service == nil:
		if !InNamespacePath(sent.Path, own) {
			return fmt.Errorf("apiCall.urlPath %s: a namespaced policy of namespace %s may read only paths under /api/v1/namespaces/%s/ or /apis/<group>/<version>/namespaces/%s/ (no call made)", sent, own, own, own)
		}
	}
	return nil
}

// ConfigMapOf is the namespace and name a configMap entry reads, its
// variables substituted; the namespace defaults to "default", as Kyverno's.
func ConfigMapOf(ref *kyvernov1.ConfigMapReference, data map[string]any) (namespace, name string, err error) {
	if name, err = variables.SubstituteString(ref.Name, data); err != nil {
		return "", "", fmt.Errorf("configMap.name: %w", err)
	}
	if namespace, err = variables.SubstituteString(ref.Namespace, data); err != nil {
		return "", "", fmt.Errorf("configMap.namespace: %w", err)
	}
	if namespace == "" {
		namespace = "default"
	}
	return namespace, name, nil
}

// describeEntry names what a context entry reads.
func describeEntry(entry *kyvernov1.ContextEntry) string {
	switch {
	case entry.ConfigMap != nil:
		return "configMap " + entry.ConfigMap.Namespace + "/" + entry.ConfigMap.Name
	case entry.APICall != nil && entry.APICall.URLPath != "":
		return "apiCall " + entry.APICall.URLPath
	case entry.APICall != nil:
		return "apiCall service"
	case entry.GlobalReference != nil:
		return "globalReference " + entry.GlobalReference.Name
	}
	return "entry"
}

func variableValue(v *kyvernov1.Variable, data map[string]any) (any, error) {
	var value any
	if v.Value != nil {
		raw, err := decode(v.Value, "variable.value")
		if err != nil {
			return nil, err
		}
		if value, err = variables.Substitute(raw, data); err != nil {
			return nil, err
		}
	}
	if v.JMESPath != "" {
		expr, err := variables.SubstituteString(v.JMESPath, data)
		if err != nil {
			return nil, err
		}
		source := any(data)
		if v.Value != nil {
			source = value
		}
		value, err = variables.Query(expr, source)
		if err != nil && v.Default == nil {
			return nil, fmt.Errorf("jmesPath %q: %w", v.JMESPath, err)
		}
	}
	if value == nil && v.Default != nil {
		def, err := decode(v.Default, "variable.default")
		if err != nil {
			return nil, err
		}
		return variables.Substitute(def, data)
	}
	return value, nil
}

func lookupPath(data map[string]any, path string) (any, bool) {
	var cur any = data
	for _, k := range splitPath(path) {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// splitPath splits a dotted path (a values file's key, a context entry's
// name) into its keys. A segment in double quotes is a JMESPath quoted
// identifier: its dots are part of the key, and it may hold JSON escapes
// (\" for a quote).
func splitPath(path string) []string {
	if !strings.Contains(path, `"`) {
		return strings.Split(path, ".")
	}
	var keys []string
	start, quoted := 0, false
	for i := 0; i <= len(path); i++ {
		switch {
		case i == len(path) || (path[i] == '.' && !quoted):
			keys = append(keys, unquoteKey(path[start:i]))
			start = i + 1
		case path[i] == '\\' && quoted && i+1 < len(path):
			i++
		case path[i] == '"':
			quoted = !quoted
		}
	}
	return keys
}

// unquoteKey reads a quoted identifier ("example.com/x"); any other segment
// is a key as written.
func unquoteKey(seg string) string {
	if len(seg) < 2 || seg[0] != '"' || seg[len(seg)-1] != '"' {
		return seg
	}
	var key string
	if err := json.Unmarshal([]byte(seg), &key); err != nil {
		return seg[1 : len(seg)-1]
	}
	return key
}
