package variables

import (
	"reflect"
	"testing"
)

func TestResolveReferences(t *testing.T) {
	tests := map[string]struct {
		in      any
		want    any
		wantErr bool
	}{
		"a sibling's value, typed": {
			in: map[string]any{"spec": map[string]any{"^(containers)": []any{map[string]any{
				"livenessProbe":  map[string]any{"tcpSocket": map[string]any{"port": "$(./../../../readinessProbe/tcpSocket/port)"}},
				"readinessProbe": map[string]any{"tcpSocket": map[string]any{"port": float64(3000)}},
			}}}},
			want: map[string]any{"spec": map[string]any{"^(containers)": []any{map[string]any{
				"livenessProbe":  map[string]any{"tcpSocket": map[string]any{"port": float64(3000)}},
				"readinessProbe": map[string]any{"tcpSocket": map[string]any{"port": float64(3000)}},
			}}}},
		},
		"an operator leads the value": {
			in:   map[string]any{"a": "$(<./../b)", "b": "3000"},
			want: map[string]any{"a": "<3000", "b": "3000"},
		},
		"a reference inside a longer string": {
			in:   map[string]any{"a": "x-$(./../b)-y", "b": float64(2)},
			want: map[string]any{"a": "x-2-y", "b": float64(2)},
		},
		"a key written with an anchor is found without it": {
			in:   map[string]any{"a": "$(./../b/c)", "=(b)": map[string]any{"c": "v"}},
			want: map[string]any{"a": "v", "=(b)": map[string]any{"c": "v"}},
		},
		"an escaped reference stays, without its backslash": {
			in:   map[string]any{"env": `x=\$(./../y)`},
			want: map[string]any{"env": "x=$(./../y)"},
		},
		"shell substitutions are left alone": {
			in:   map[string]any{"cmd": "echo $(date)"},
			want: map[string]any{"cmd": "echo $(date)"},
		},
		"a reference to a reference": {
			in:   map[string]any{"a": "$(./../b)", "b": "$(./../c)", "c": "end"},
			want: map[string]any{"a": "end", "b": "end", "c": "end"},
		},
		"a missing target is an error":            {in: map[string]any{"a": "$(./../nothing)"}, wantErr: true},
		"a path leaving the document is an error": {in: map[string]any{"a": "$(./../../../x)"}, wantErr: true},
		"a reference cycle is an error":           {in: map[string]any{"a": "$(./../b)", "b": "$(./../a)"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ResolveReferences(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %#v, want an error", got)
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

func TestSubstituteResolvesReferencesToo(t *testing.T) {
	in := map[string]any{"a": "$(./../b)", "b": "{{ request.operation }}"}
	got, err := Substitute(in, doc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": "CREATE", "b": "CREATE"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}
