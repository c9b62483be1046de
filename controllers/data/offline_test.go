package data

import (
	"context"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
)

func offlineObjects() []map[string]any {
	return []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings", "namespace": "shop"}, "data": map[string]any{"team": "a"}},
		{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db", "namespace": "shop", "labels": map[string]any{"status": "approved"}}},
		{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "tls", "namespace": "edge"}},
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "shop", "labels": map[string]any{"env": "prod"}}},
		{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": map[string]any{"name": "web", "namespace": "shop"}},
	}
}

// The offline store answers configMap entries, apiCall GETs of objects and
// lists (with jmesPath), and CEL's resource library from its objects; what
// it lacks is an error naming it.
func TestOfflineServesTheContext(t *testing.T) {
	o, err := NewOffline(offlineObjects())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := map[string]any{"request": map[string]any{"namespace": "shop"}}
	apiCallEntry := func(path, jp string) kyvernov1.ContextEntry {
		return kyvernov1.ContextEntry{Name: "x", APICall: &kyvernov1.ContextAPICall{URLPath: path, JMESPath: jp}}
	}
	for _, tc := range []struct {
		entry   kyvernov1.ContextEntry
		want    any
		wantErr string
	}{
		{entry: kyvernov1.ContextEntry{Name: "x", ConfigMap: &kyvernov1.ConfigMapReference{Name: "settings", Namespace: "{{ request.namespace }}"}}, want: "a"},
		{entry: kyvernov1.ContextEntry{Name: "x", ConfigMap: &kyvernov1.ConfigMapReference{Name: "gone", Namespace: "shop"}}, wantErr: "configmap shop/gone not found in the context"},
		{entry: apiCallEntry("/api/v1/namespaces/{{ request.namespace }}/secrets/db", "metadata.labels.status"), want: "approved"},
		{entry: apiCallEntry("/api/v1/namespaces/shop/secrets", "length(items)"), want: float64(1)},
		{entry: apiCallEntry("/api/v1/secrets", "length(items)"), want: float64(2)},
		{entry: apiCallEntry("/api/v1/namespaces/shop", "metadata.labels.env"), want: "prod"},
		{entry: apiCallEntry("/apis/networking.k8s.io/v1/ingresses", "items[0].metadata.name"), want: "web"},
		{entry: apiCallEntry("/api/v1/namespaces/shop/secrets/mysecret", ""), wantErr: `failed to fetch data for APICall: failed to GET resource with raw url: /api/v1/namespaces/shop/secrets/mysecret: secrets "mysecret" not found`},
		{entry: apiCallEntry("/version", ""), wantErr: "is not an API path"},
	} {
		got, err := o.Load(ctx, "p", tc.entry, data)
		if tc.entry.ConfigMap != nil && err == nil {
			got = got.(map[string]any)["data"].(map[string]any)["team"]
		}
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: error %v, want %q", tc.entry, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%+v: %v", tc.entry, err)
		case got != tc.want:
			t.Errorf("%+v: got %#v, want %#v", tc.entry, got, tc.want)
		}
	}
	withDefault := apiCallEntry("/api/v1/namespaces/shop/secrets/gone", "")
	withDefault.APICall.Default = &apiextv1.JSON{Raw: []byte(`"none"`)}
	if got, err := o.Load(ctx, "p", withDefault, data); err != nil || got != "none" {
		t.Errorf("default: got %v, %v", got, err)
	}
	if obj, err := o.GetResource(ctx, "v1", "secrets", "edge", "tls"); err != nil || obj["kind"] != "Secret" {
		t.Errorf("resource.Get: %v, %v", obj, err)
	}
	if list, err := o.ListResources(ctx, "v1", "secrets", "edge"); err != nil || len(list["items"].([]any)) != 1 {
		t.Errorf("resource.List: %v, %v", list, err)
	}
	if _, err := NewOffline([]map[string]any{{"kind": "Secret"}}); err == nil {
		t.Error("an object without apiVersion and name was accepted")
	}
}
