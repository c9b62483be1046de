package cel

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

type fakeData map[string]map[string]any

func (f fakeData) GetResource(_ context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	if obj, ok := f[apiVersion+"/"+resource+"/"+namespace+"/"+name]; ok {
		return obj, nil
	}
	return nil, errors.New(resource + ` "` + name + `" not found`)
}

func (f fakeData) ListResources(_ context.Context, apiVersion, resource, namespace string) (map[string]any, error) {
	var items []any
	for k, obj := range f {
		if strings.HasPrefix(k, apiVersion+"/"+resource+"/"+namespace+"/") {
			items = append(items, obj)
		}
	}
	return map[string]any{"items": items}, nil
}

// Kyverno's resource library reads the cluster through ClusterData; with
// none (offline) or for a missing object a call is an error naming it.
func TestResourceLibrary(t *testing.T) {
	data := fakeData{"v1/configmaps/ns/settings": {"data": map[string]any{"team": "a"}}}
	for _, tc := range []struct {
		expr    string
		data    ClusterData
		holds   bool
		errPart string
	}{
		{"resource.Get('v1', 'configmaps', 'ns', 'settings').data.team == 'a'", data, true, ""},
		{"resource.get('v1', 'configmaps', 'ns', 'settings').data.team == 'b'", data, false, ""},
		{"size(resource.List('v1', 'configmaps', 'ns').items) == 1", data, true, ""},
		{"resource.Get('v1', 'configmaps', 'ns', 'gone').data.team == 'a'", data, false, `configmaps "gone" not found`},
		{"resource.Get('v1', 'configmaps', 'ns', 'settings').data.team == 'a'", nil, false, "no cluster data"},
	} {
		p, err := Compile(Spec{Mode: ModeKyverno, Validations: []admissionregistrationv1.Validation{{Expression: tc.expr}}})
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		out := p.Evaluate(context.Background(), &Input{Object: map[string]any{}, Data: tc.data})
		if holds := out.Failed == -1; holds != tc.holds {
			t.Errorf("%s: holds %v, want %v (error %v)", tc.expr, holds, tc.holds, out.Err)
		}
		if tc.errPart != "" && (out.Err == nil || !strings.Contains(out.Err.Error(), tc.errPart)) {
			t.Errorf("%s: error %v, want one saying %q", tc.expr, out.Err, tc.errPart)
		}
	}
}

// countingData counts the calls that reach the cluster.
type countingData struct {
	fakeData
	calls int
}

func (c *countingData) GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	c.calls++
	return c.fakeData.GetResource(ctx, apiVersion, resource, namespace, name)
}

func (c *countingData) ListResources(ctx context.Context, apiVersion, resource, namespace string) (map[string]any, error) {
	c.calls++
	return c.fakeData.ListResources(ctx, apiVersion, resource, namespace)
}

// R47: a namespaced policy's resource calls read only its own namespace;
// another namespace, or none (the whole cluster), is an error and no call
// reaches the cluster.
func TestResourceLibraryOfANamespacedPolicy(t *testing.T) {
	data := &countingData{fakeData: fakeData{
		"v1/configmaps/team-a/settings":   {"data": map[string]any{"team": "a"}},
		"v1/configmaps/team-b/secret-ish": {"data": map[string]any{"password": "hunter2"}},
	}}
	for _, tc := range []struct {
		expr    string
		calls   int
		errPart string
	}{
		{"resource.Get('v1', 'configmaps', 'team-a', 'settings').data.team == 'a'", 1, ""},
		{"size(resource.List('v1', 'configmaps', 'team-a').items) == 1", 1, ""},
		{"resource.Get('v1', 'configmaps', 'team-b', 'secret-ish').data.password == 'x'", 0,
			"a namespaced policy of namespace team-a may read only its own namespace, not namespace team-b (no call made)"},
		{"size(resource.List('v1', 'configmaps', '').items) > 0", 0, "not the whole cluster"},
		{"resource.Get('v1', 'nodes', '', 'node-1') != null", 0, "not the whole cluster"},
		// Issue 53: only the namespace argument was checked; the others
		// become segments of the request's path too.
		{"size(resource.List('v1', '../../namespaces/team-b/configmaps', 'team-a').items) > 0", 0, "is not a resource's plural name"},
		{"size(resource.List('v1', '../../nodes', 'team-a').items) > 0", 0, "is not a resource's plural name"},
		{"resource.Get('v1', 'configmaps', 'team-a', '../../team-b/configmaps/secret-ish') != null", 0, "is not an object's name"},
		{"resource.Get('v1', 'configmaps', 'team-a', '..') != null", 0, "is not an object's name"},
		{"resource.Get('v1', 'configmaps', 'team-a', 'x%2F..%2F..') != null", 0, "is not an object's name"},
		{"resource.Get('v1', 'configmaps', 'team-a', 'x#/../../team-b') != null", 0, "is not an object's name"},
		{"resource.Get('v1', 'configmaps', 'team-a', '') != null", 0, "is not an object's name"},
		{"resource.Get('v1/../../../api/v1', 'configmaps', 'team-a', 'x') != null", 0, "is not a group/version"},
		{"resource.Get('../v1', 'configmaps', 'team-a', 'x') != null", 0, "is not a group/version"},
		{"resource.Get('v1', 'configmaps', 'team-a/../team-b', 'x') != null", 0, "is not a namespace's name"},
		{"resource.Get('v1', 'secrets/x', 'team-a', 'y') != null", 0, "is not a resource's plural name"},
	} {
		data.calls = 0
		p, err := Compile(Spec{Mode: ModeKyverno, Validations: []admissionregistrationv1.Validation{{Expression: tc.expr}}})
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		out := p.Evaluate(context.Background(), &Input{Object: map[string]any{}, Data: data, OwnNamespace: "team-a"})
		if data.calls != tc.calls {
			t.Errorf("%s: %d calls reached the cluster, want %d", tc.expr, data.calls, tc.calls)
		}
		if tc.errPart == "" && out.Failed != -1 {
			t.Errorf("%s: does not hold (error %v)", tc.expr, out.Err)
		}
		if tc.errPart != "" && (out.Err == nil || !strings.Contains(out.Err.Error(), tc.errPart)) {
			t.Errorf("%s: error %v, want one saying %q", tc.expr, out.Err, tc.errPart)
		}
	}
}

// Issue 55, read in Kyverno's sdk (resource.Lib's namespacedEnv): a
// namespaced policy's resource library takes no namespace, the policy's
// own being the one read: Get(apiVersion, resource, name) and
// List(apiVersion, resource); the cluster-wide forms do not compile.
func TestResourceLibraryOfANamespacedPolicyTakesNoNamespace(t *testing.T) {
	data := &countingData{fakeData: fakeData{
		"v1/configmaps/team-a/settings": {"data": map[string]any{"team": "a"}},
	}}
	for _, expr := range []string{
		"resource.Get('v1', 'configmaps', 'settings').data.team == 'a'",
		"resource.get('v1', 'configmaps', 'settings').data.team == 'a'",
		"size(resource.List('v1', 'configmaps').items) == 1",
	} {
		p, err := Compile(Spec{Mode: ModeKyverno, Namespaced: true, Validations: []admissionregistrationv1.Validation{{Expression: expr}}})
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if out := p.Evaluate(context.Background(), &Input{Object: map[string]any{}, Data: data, OwnNamespace: "team-a"}); out.Failed != -1 {
			t.Errorf("%s: does not hold (error %v)", expr, out.Err)
		}
	}
	for _, expr := range []string{
		"resource.Get('v1', 'configmaps', 'team-b', 'settings') != null",
		"size(resource.List('v1', 'configmaps', 'team-b').items) > 0",
	} {
		if _, err := Compile(Spec{Mode: ModeKyverno, Namespaced: true, Validations: []admissionregistrationv1.Validation{{Expression: expr}}}); err == nil || !strings.Contains(err.Error(), "found no matching overload") {
			t.Errorf("%s compiled for a namespaced policy (err %v), as Kyverno's does not", expr, err)
		}
	}
}
