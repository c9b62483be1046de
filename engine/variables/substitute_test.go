package variables

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var doc = map[string]any{
	"request": map[string]any{
		"operation": "CREATE",
		"object": map[string]any{
			"metadata": map[string]any{
				"name":        "web",
				"labels":      map[string]any{"app": "shop"},
				"annotations": map[string]any{"corp.com/team": "blue", "empty": nil},
			},
			"spec": map[string]any{
				"replicas": float64(3),
				"containers": []any{
					map[string]any{"name": "a", "image": "nginx:1.2", "ports": []any{map[string]any{"containerPort": int64(80)}}},
					map[string]any{"name": "b", "image": "busybox"},
				},
			},
		},
		"oldObject": nil,
	},
	"config": map[string]any{"data": map[string]any{"template": "{{ request.operation }}", "key": "app"}},
}

func TestSubstitute(t *testing.T) {
	tests := map[string]struct {
		in      any
		want    any
		wantErr error
	}{
		"a lone variable keeps its type":           {in: "{{ request.object.spec.replicas }}", want: float64(3)},
		"a lone int64 keeps its type":              {in: "{{ request.object.spec.containers[0].ports[0].containerPort }}", want: int64(80)},
		"an int64 through a function is a float64": {in: "{{ max(request.object.spec.containers[].ports[].containerPort) }}", want: float64(80)},
		"an embedded number has no trailing .0":    {in: "replicas={{request.object.spec.replicas}}", want: "replicas=3"},
		"an embedded list is rendered as JSON":     {in: "x {{ request.object.spec.containers[].name }}", want: `x ["a","b"]`},
		"an embedded object is rendered as JSON":   {in: "l={{ request.object.metadata.labels }}", want: `l={"app":"shop"}`},
		"an embedded null is rendered as null":     {in: "old={{ request.oldObject }}", want: "old=null"},
		"a lone object variable is an object":      {in: "{{ request.object.metadata.labels }}", want: map[string]any{"app": "shop"}},
		"several variables in one string":          {in: "{{request.operation}}/{{request.object.metadata.name}}", want: "CREATE/web"},
		"an escaped variable stays literal":        {in: `\{{ request.operation }}`, want: "{{ request.operation }}"},
		"an escaped variable beside a real one":    {in: `\{{ a }} {{ request.operation }}`, want: "{{ a }} CREATE"},
		"multiselect hashes nest braces":           {in: "{{ request.object.metadata.{n: name} }}", want: map[string]any{"n": "web"}},
		"a JSON literal with braces":               {in: "{{ lookup(`{\"a\":\"b\"}`, 'a') }}", want: "b"},
		"standard functions work":                  {in: "{{ length(request.object.spec.containers) }}", want: float64(2)},
		"custom functions work":                    {in: "{{ to_upper(request.object.metadata.name) }}", want: "WEB"},
		"quoted keys with dots and slashes":        {in: `{{ request.object.metadata.annotations."corp.com/team" }}`, want: "blue"},
		"a nested variable is resolved first":      {in: "{{ request.object.metadata.labels.{{ config.data.key }} }}", want: "shop"},
		"a nested variable inside quotes":          {in: "{{ to_upper('{{ request.object.metadata.name }}') }}", want: "WEB"},
		"a substituted value is substituted again": {in: "op: {{ config.data.template }}", want: "op: CREATE"},
		"a shallow variable is substituted once":   {in: "op: {{- config.data.template }}", want: "op: {{ request.operation }}"},
		"a lone variable is not substituted again": {in: "{{ config.data.template }}", want: "{{ request.operation }}"},
		"a default value covers a missing field":   {in: "{{ request.object.metadata.labels.tier || 'none' }}", want: "none"},
		"an existing null is null, not an error":   {in: "{{ request.object.metadata.annotations.empty }}", want: nil},
		"a field of a null parent is null":         {in: "{{ request.oldObject.metadata.name }}", want: nil},
		"an empty filter result is null":           {in: "{{ request.object.spec.containers[?name=='z'] | [0] }}", want: nil},
		"@ is the resource at the same path": {
			in:   map[string]any{"metadata": map[string]any{"name": "{{ @ }}"}},
			want: map[string]any{"metadata": map[string]any{"name": "web"}},
		},
		"@ ignores anchors and follows indexes": {
			in:   map[string]any{"spec": map[string]any{"=(containers)": []any{map[string]any{"(image)": "{{@}}"}}}},
			want: map[string]any{"spec": map[string]any{"=(containers)": []any{map[string]any{"(image)": "nginx:1.2"}}}},
		},
		"keys and values are both substituted": {
			in:   map[string]any{"{{request.object.metadata.name}}": []any{"{{request.operation}}", "plain", float64(1)}},
			want: map[string]any{"web": []any{"CREATE", "plain", float64(1)}},
		},
		"a missing variable is an error":                          {in: "{{ request.object.missing }}", wantErr: ErrUnresolved},
		"a missing nested field is an error":                      {in: "x-{{ request.object.metadata.labels.tier }}", wantErr: ErrUnresolved},
		"a missing variable in a list is an error":                {in: []any{"{{ nothing.here }}"}, wantErr: ErrUnresolved},
		"a variable nothing defines is an error in a comparison":  {in: "{{ undefined == 'x' }}", wantErr: ErrUnresolved},
		"a variable nothing defines is an error in a function":    {in: "{{ to_string(undefined) }}", wantErr: ErrUnresolved},
		"a variable nothing defines is an error in a projection":  {in: "{{ undefined[].name }}", wantErr: ErrUnresolved},
		"a variable nothing defines is an error in a multiselect": {in: "{{ [undefined, request.operation] }}", wantErr: ErrUnresolved},
		"a variable nothing defines is an error as the default":   {in: "{{ request.object.metadata.labels.tier || undefined.x }}", wantErr: ErrUnresolved},
		"a variable nothing defines takes the default after ||":   {in: "{{ undefined.tier || 'none' }}", want: "none"},
		// Issue 40: the right side of || is read only when the left is
		// empty; "" (an empty quoted name) is written for an empty default.
		"the right of || is not read when the left has a value":  {in: "{{ request.object.metadata.labels.app || undefined.x }}", want: "shop"},
		`a quoted key with a "" default reads the value`:         {in: `{{ request.object.metadata.annotations."corp.com/team" || "" }}`, want: "blue"},
		`a missing key with a "" default is null, no error`:      {in: `{{ request.object.metadata.annotations."corp.com/owner" || "" }}`, want: nil},
		`an undefined variable with a "" default is null`:        {in: `{{ mydata.data."some-key" || "" }}`, want: nil},
		"a defined variable in a comparison is read as usual":    {in: "{{ config.data.key == 'app' }}", want: true},
		"a missing field under a defined variable is null there": {in: "{{ request.object.metadata.labels.tier == 'x' }}", want: false},
		"names read inside a projection are not variables":       {in: "{{ request.object.spec.containers[?nothing == 'x'] | length(@) }}", want: float64(0)},
		"a malformed expression is an error":                     {in: "{{ request.[ }}", wantErr: errAny},
		"a function type error is an error":                      {in: "{{ to_upper(request.object.spec.replicas) }}", wantErr: errAny},
		"an empty variable is an error":                          {in: "{{}}", wantErr: errAny},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Substitute(tc.in, doc)
			if tc.wantErr != nil {
				if err == nil || (tc.wantErr != errAny && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("got %#v, %v; want error %v", got, err, tc.wantErr)
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

// errAny stands for "some error" in test tables.
var errAny = errors.New("any error")

func TestSubstituteErrorNamesTheVariable(t *testing.T) {
	_, err := Substitute("{{ request.object.foo }}", doc)
	if err == nil || !strings.Contains(err.Error(), "failed to resolve request.object.foo at path") {
		t.Errorf("error %v does not name the variable", err)
	}
}

func TestLenientMode(t *testing.T) {
	tests := map[string]struct {
		in   any
		want any
	}{
		"a missing field becomes the empty string":    {in: "{{ request.object.missing }}", want: ""},
		"a failing function becomes the empty string": {in: "{{ to_upper(request.object.spec.replicas) }}", want: ""},
		"an embedded missing field is empty":          {in: "a-{{ request.object.missing }}-b", want: "a--b"},
		"an existing null stays null":                 {in: "{{ request.oldObject }}", want: nil},
		"a resolved variable is as in Strict mode":    {in: "{{ request.object.spec.replicas }}", want: float64(3)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := SubstituteMode(tc.in, doc, Lenient)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
	if _, err := SubstituteMode("{{ request.[ }}", doc, Lenient); err == nil {
		t.Error("a malformed expression is not an error in Lenient mode")
	}
}

func TestDeleteRequestsReadTheOldObject(t *testing.T) {
	data := map[string]any{"request": map[string]any{
		"operation": "DELETE",
		"object":    nil,
		"oldObject": map[string]any{"metadata": map[string]any{"name": "gone"}},
	}}
	got, err := SubstituteString("{{ request.object.metadata.name }}", data)
	if err != nil || got != "gone" {
		t.Errorf("got %q, %v; want gone", got, err)
	}
}

func TestSubstituteSharesValuesWithoutVariables(t *testing.T) {
	in := map[string]any{"a": []any{"x"}}
	got, err := Substitute(in, doc)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(got).Pointer() != reflect.ValueOf(in).Pointer() {
		t.Error("a value without variables was copied")
	}
}

func TestSubstituteStopsSelfReferences(t *testing.T) {
	data := map[string]any{"loop": "x {{ loop }}"}
	if _, err := SubstituteString("{{ loop }} y", data); err == nil {
		t.Error("a value that keeps substituting to itself did not fail")
	}
}

func TestReferences(t *testing.T) {
	tests := map[string]struct {
		in   any
		want []string
	}{
		"plain variables":               {in: "{{ a.b }} and {{c}}", want: []string{"a.b", "c"}},
		"nested variables, outer too":   {in: "{{ a.{{ b }} }}", want: []string{"b", "a.{{ b }}"}},
		"escaped variables are skipped": {in: `\{{ a }} {{ b }}`, want: []string{"b"}},
		"shallow variables":             {in: "{{- hcl }}", want: []string{"hcl"}},
		"keys and lists":                {in: map[string]any{"{{ k }}": []any{"{{ v }}"}}, want: []string{"k", "v"}},
		"no variables":                  {in: "plain", want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := References(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHasVariables(t *testing.T) {
	tests := map[string]struct {
		in   any
		want bool
	}{
		"a variable in a value":     {in: map[string]any{"a": "{{ x }}"}, want: true},
		"a variable in a key":       {in: map[string]any{"{{ x }}": "a"}, want: true},
		"a reference":               {in: []any{"$(./../x)"}, want: true},
		"no variables":              {in: map[string]any{"a": []any{"b", float64(1), nil}}, want: false},
		"a lone brace is not one":   {in: "{ x }", want: false},
		"a number has no variables": {in: float64(1), want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := HasVariables(tc.in); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
