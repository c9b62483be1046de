package variables

import (
	"errors"
	"reflect"
	"testing"
)

var doc = map[string]any{
	"request": map[string]any{
		"operation": "CREATE",
		"object": map[string]any{
			"metadata": map[string]any{"name": "web", "labels": map[string]any{"app": "shop"}},
			"spec": map[string]any{
				"replicas":   float64(3),
				"containers": []any{map[string]any{"name": "a", "image": "nginx:1.2"}, map[string]any{"name": "b", "image": "busybox"}},
			},
		},
	},
}

func TestSubstitute(t *testing.T) {
	tests := map[string]struct {
		in      any
		want    any
		wantErr error
	}{
		"a lone variable keeps its type":         {in: "{{ request.object.spec.replicas }}", want: float64(3)},
		"an embedded number has no trailing .0":  {in: "replicas={{request.object.spec.replicas}}", want: "replicas=3"},
		"an embedded list is rendered as JSON":   {in: "x {{ request.object.spec.containers[].name }}", want: `x ["a","b"]`},
		"a lone object variable is an object":    {in: "{{ request.object.metadata.labels }}", want: map[string]any{"app": "shop"}},
		"several variables in one string":        {in: "{{request.operation}}/{{request.object.metadata.name}}", want: "CREATE/web"},
		"an escaped variable stays literal":      {in: `\{{ request.operation }}`, want: "{{ request.operation }}"},
		"multiselect hashes nest braces":         {in: "{{ request.object.metadata.{n: name} }}", want: map[string]any{"n": "web"}},
		"functions of the standard library work": {in: "{{ length(request.object.spec.containers) }}", want: float64(2)},
		"custom functions work":                  {in: "{{ to_upper(request.object.metadata.name) }}", want: "WEB"},
		"keys and values are both substituted": {
			in:   map[string]any{"{{request.object.metadata.name}}": []any{"{{request.operation}}"}},
			want: map[string]any{"web": []any{"CREATE"}},
		},
		"a missing variable is an error": {in: "{{ request.object.missing }}", wantErr: ErrUnresolved},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Substitute(tc.in, doc)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestLenientModeResolvesMissingToNull(t *testing.T) {
	got, err := SubstituteMode("{{ request.object.missing }}", doc, Lenient)
	if err != nil || got != nil {
		t.Errorf("got %#v, %v; want nil, nil", got, err)
	}
}

func TestFunctions(t *testing.T) {
	tests := map[string]struct {
		expr string
		want any
	}{
		"add numbers":                      {"add(`1`, `2`)", float64(3)},
		"add quantities":                   {"add('1Gi', '512Mi')", "1536Mi"},
		"add durations":                    {"add('1h', '30m')", "1h30m0s"},
		"divide quantities gives a number": {"divide('1Gi', '512Mi')", float64(2)},
		"multiply a quantity":              {"multiply('100m', `3`)", "300m"},
		"modulo":                           {"modulo(`7`, `3`)", float64(1)},
		"regex_match":                      {"regex_match('^nginx', 'nginx:1.2')", true},
		"pattern_match":                    {"pattern_match('nginx:*', 'nginx:1.2')", true},
		"split":                            {"split('a,b', ',')", []any{"a", "b"}},
		"replace_all":                      {"replace_all('a-b-c', '-', '.')", "a.b.c"},
		"label_match":                      {"label_match(`{\"app\":\"shop\"}`, request.object.metadata.labels)", true},
		"items of an object":               {"items(`{\"a\":1}`, 'k', 'v')", []any{map[string]any{"k": "a", "v": float64(1)}}},
		"semver_compare":                   {"semver_compare('1.2.3', '>=1.2.0')", true},
		"base64 round trip":                {"base64_decode(base64_encode('x'))", "x"},
		"parse_json":                       {"parse_json('{\"a\":[1]}').a[0]", float64(1)},
		"lookup":                           {"lookup(request.object.metadata, 'name')", "web"},
		"object_from_lists":                {"object_from_lists(['a'], [`1`])", map[string]any{"a": float64(1)}},
		"sum of quantities":                {"sum(['1Gi', '1Gi'])", "2Gi"},
		"truncate":                         {"truncate('abcdef', `3`)", "abc"},
		"contains on a projection":         {"contains(request.object.spec.containers[].name, 'b')", true},
		"a function call on a field":       {"request.object.metadata.keys(@) | length(@)", float64(2)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Query(tc.expr, doc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %#v, want %#v", tc.expr, got, tc.want)
			}
		})
	}
}

func TestQueryNeverPanics(t *testing.T) {
	for _, expr := range []string{"divide(`1`, `0`)", "[", "foo[?", "modulo('a', `1`)", "`{`"} {
		if _, err := Query(expr, doc); err == nil {
			t.Errorf("%s: no error", expr)
		}
	}
}
