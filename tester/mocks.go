package tester

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/engine/variables"
)

// APICallResponse is one entry of a test's apiCallResponses: the answer
// to an HTTP call (CEL http.*, a classic apiCall's service.url) or to a
// classic apiCall's urlPath, for an optional method.
type APICallResponse struct {
	URL      string `json:"url,omitempty"`
	URLPath  string `json:"urlPath,omitempty"`
	Method   string `json:"method,omitempty"`
	Response struct {
		StatusCode int `json:"statusCode,omitempty"`
		Body       any `json:"body"`
	} `json:"response"`
}

// GlobalContextEntryMock is one entry of a test's globalContextEntries:
// the data a GlobalContextEntry of that name holds (data, or resources),
// an optional fieldPath, and named projections.
type GlobalContextEntryMock struct {
	Name          string           `json:"name"`
	Data          any              `json:"data,omitempty"`
	Resources     []map[string]any `json:"resources,omitempty"`
	ResourceFiles []string         `json:"resourceFiles,omitempty"`
	FieldPath     string           `json:"fieldPath,omitempty"`
	Projections   []struct {
		Name string `json:"name"`
		Path string `json:"path"`
	} `json:"projections,omitempty"`
}

// mocks serves a test's apiCallResponses and globalContextEntries, and
// what it does not mock from the test's cluster data (nil: none), as
// Kyverno's CLI does.
type mocks struct {
	calls   map[string]APICallResponse // "METHOD URL" and "URL"
	globals map[string]any             // resolved data by entry name
	cluster interface {
		engine.ContextLoader
		cel.ClusterData
	}
}

// newMocks checks and indexes a test's mocks; an entry that cannot be
// used is an error naming it.
func newMocks(dir string, calls []APICallResponse, globals []GlobalContextEntryMock) (*mocks, error) {
	m := &mocks{calls: map[string]APICallResponse{}, globals: map[string]any{}}
	for i, c := range calls {
		target := strings.TrimSpace(c.URL)
		switch {
		case target != "" && c.URLPath != "":
			return nil, fmt.Errorf("apiCallResponses[%d]: url and urlPath are mutually exclusive", i)
		case target == "" && c.URLPath == "":
			return nil, fmt.Errorf("apiCallResponses[%d]: either url or urlPath is required", i)
		case target != "":
			u, err := url.Parse(target)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
				return nil, fmt.Errorf("apiCallResponses[%d]: url %q must be an absolute http or https URL", i, target)
			}
		case !strings.HasPrefix(c.URLPath, "/"):
			return nil, fmt.Errorf("apiCallResponses[%d]: urlPath %q must be an absolute path starting with '/'", i, c.URLPath)
		default:
			target = c.URLPath
		}
		method := strings.ToUpper(strings.TrimSpace(c.Method))
		if method != "" && method != "GET" && method != "POST" {
			return nil, fmt.Errorf("apiCallResponses[%d]: method must be GET or POST", i)
		}
		if c.Response.StatusCode == 0 {
			c.Response.StatusCode = 200
		}
		key := strings.TrimSpace(method + " " + target)
		if _, dup := m.calls[key]; dup {
			return nil, fmt.Errorf("apiCallResponses[%d]: a second entry for %q", i, key)
		}
		m.calls[key] = c
	}
	for i, g := range globals {
		if g.Name == "" {
			return nil, fmt.Errorf("globalContextEntries[%d]: name is required", i)
		}
		var root any
		switch {
		case g.Resources != nil || g.ResourceFiles != nil:
			list := []any{}
			for _, r := range g.Resources {
				list = append(list, r)
			}
			for _, f := range g.ResourceFiles {
				docs, err := ReadManifests(resolvePath(dir, f))
				if err != nil {
					return nil, fmt.Errorf("globalContextEntries %q: %w", g.Name, err)
				}
				for _, d := range docs {
					list = append(list, d.Object)
				}
			}
			root = list
		case g.Data != nil:
			root = g.Data
		case len(g.Projections) > 0:
			return nil, fmt.Errorf("globalContextEntries %q: data is required when projections are set", g.Name)
		}
		if g.FieldPath != "" && root != nil {
			v, err := variables.Query(g.FieldPath, root)
			if err != nil {
				return nil, fmt.Errorf("globalContextEntries %q fieldPath: %w", g.Name, err)
			}
			root = v
		}
		if len(g.Projections) > 0 {
			out := map[string]any{}
			for _, p := range g.Projections {
				if p.Name == "" {
					return nil, fmt.Errorf("globalContextEntries %q: a projection has no name", g.Name)
				}
				v, err := variables.Query(p.Path, root)
				if err != nil {
					return nil, fmt.Errorf("globalContextEntries %q projection %q: %w", g.Name, p.Name, err)
				}
				out[p.Name] = v
			}
			root = out
		}
		m.globals[g.Name] = root
	}
	return m, nil
}

func resolvePath(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// call finds the mocked answer of a call.
func (m *mocks) call(method, target string) (APICallResponse, bool) {
	if c, ok := m.calls[method+" "+target]; ok {
		return c, true
	}
	c, ok := m.calls[target]
	return c, ok
}

// Load implements engine.ContextLoader: mocked apiCalls and
// globalReferences, the rest from the cluster data.
func (m *mocks) Load(ctx context.Context, policy string, entry kyvernov1.ContextEntry, data map[string]any) (any, error) {
	switch {
	case entry.APICall != nil:
		target := entry.APICall.URLPath
		if svc := entry.APICall.Service; svc != nil {
			var service struct {
				URL string `json:"url"`
			}
			if err := json.Unmarshal(svc.Raw, &service); err != nil {
				return nil, fmt.Errorf("apiCall.service: %w", err)
			}
			target = service.URL
		}
		target, err := variables.SubstituteString(target, data)
		if err != nil {
			return nil, fmt.Errorf("apiCall: %w", err)
		}
		method := strings.ToUpper(entry.APICall.Method)
		if method == "" {
			method = "GET"
		}
		if c, ok := m.call(method, target); ok {
			if c.Response.StatusCode < 200 || c.Response.StatusCode > 299 {
				return nil, fmt.Errorf("HTTP %d from apiCall mock for context entry %q", c.Response.StatusCode, entry.Name)
			}
			body := jsonValue(c.Response.Body)
			if entry.APICall.JMESPath == "" {
				return body, nil
			}
			expr, err := variables.SubstituteString(entry.APICall.JMESPath, data)
			if err != nil {
				return nil, fmt.Errorf("apiCall.jmesPath: %w", err)
			}
			return variables.Query(expr, body)
		}
	case entry.GlobalReference != nil:
		if v, ok := m.globals[entry.GlobalReference.Name]; ok {
			v = jsonValue(v)
			if entry.GlobalReference.JMESPath == "" {
				return v, nil
			}
			expr, err := variables.SubstituteString(entry.GlobalReference.JMESPath, data)
			if err != nil {
				return nil, fmt.Errorf("globalReference.jmesPath: %w", err)
			}
			return variables.Query(expr, v)
		}
	}
	if m.cluster == nil {
		if entry.APICall != nil || entry.GlobalReference != nil {
			return nil, fmt.Errorf("context entry %q: not mocked by the test (apiCallResponses, globalContextEntries)", entry.Name)
		}
		return nil, fmt.Errorf("context entry %q: the test gives no cluster data (context, clusterResources)", entry.Name)
	}
	return m.cluster.Load(ctx, policy, entry, data)
}

// HTTPCall implements cel.HTTPData: the mocked answer, as {body, statusCode}.
func (m *mocks) HTTPCall(_ context.Context, method, target string, _ any, _ map[string]string, _ string) (any, error) {
	c, ok := m.call(strings.ToUpper(method), target)
	if !ok {
		return nil, fmt.Errorf("%s %s: not mocked by the test's apiCallResponses", method, target)
	}
	return map[string]any{"body": jsonValue(c.Response.Body), "statusCode": int64(c.Response.StatusCode)}, nil
}

// Global implements cel.GlobalData.
func (m *mocks) Global(_ context.Context, _, name, projection string) (any, error) {
	v, ok := m.globals[name]
	if !ok {
		return nil, fmt.Errorf("global context entry %q: not mocked by the test's globalContextEntries", name)
	}
	v = jsonValue(v)
	if projection == "" {
		return v, nil
	}
	if p, ok := v.(map[string]any); ok {
		if pv, ok := p[projection]; ok {
			return pv, nil
		}
	}
	return nil, fmt.Errorf("global context entry %q has no projection %q", name, projection)
}

// GetResource implements cel.ClusterData from the cluster data.
func (m *mocks) GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	if m.cluster == nil {
		return nil, fmt.Errorf("%s %q not found: the test gives no cluster data", resource, name)
	}
	return m.cluster.GetResource(ctx, apiVersion, resource, namespace, name)
}

// ListResources implements cel.ClusterData from the cluster data.
func (m *mocks) ListResources(ctx context.Context, apiVersion, resource, namespace string) (map[string]any, error) {
	if m.cluster == nil {
		return map[string]any{"apiVersion": apiVersion, "kind": "List", "items": []any{}}, nil
	}
	return m.cluster.ListResources(ctx, apiVersion, resource, namespace)
}

// jsonValue is a value with JSON's numbers, as an HTTP answer decodes.
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

// ImageMetadata implements cel.ImageData from the cluster data (a context
// file's images).
func (m *mocks) ImageMetadata(ctx context.Context, ref string, platforms []string, insecure bool) (map[string]any, error) {
	if d, ok := m.cluster.(cel.ImageData); ok && m.cluster != nil {
		return d.ImageMetadata(ctx, ref, platforms, insecure)
	}
	return nil, fmt.Errorf("image data for %s not found in the context", ref)
}
