package variables

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestQueryNormalizesNumbers(t *testing.T) {
	data := map[string]any{"i": 3, "i64": int64(4), "n": json.Number("5"), "l": []any{1, int64(2), json.Number("3.5")}}
	tests := map[string]struct {
		expr string
		want any
	}{
		"an int compares":           {expr: "i > `2`", want: true},
		"an int64 compares":         {expr: "i64 == `4`", want: true},
		"a json.Number compares":    {expr: "n < `6`", want: true},
		"a mixed list sums":         {expr: "sum(l)", want: float64(6.5)},
		"a plain path is as stored": {expr: "i64", want: int64(4)},
		"a projection is as stored": {expr: "l[1]", want: int64(2)},
		"arithmetic on ints works":  {expr: "i + i64", want: float64(7)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Query(tc.expr, data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %#v, want %#v", tc.expr, got, tc.want)
			}
		})
	}
}

func TestNormalizeCopiesOnlyWhatChanges(t *testing.T) {
	floats := map[string]any{"a": []any{float64(1)}, "b": "x"}
	if got := Normalize(floats); reflect.ValueOf(got).Pointer() != reflect.ValueOf(floats).Pointer() {
		t.Error("normalized data was copied")
	}
	ints := map[string]any{"a": []any{int64(1)}, "b": "x"}
	got := Normalize(ints).(map[string]any)
	if _, ok := ints["a"].([]any)[0].(int64); !ok {
		t.Error("Normalize changed its input")
	}
	if got["a"].([]any)[0] != float64(1) {
		t.Errorf("got %#v", got)
	}
}

func TestQueryErrors(t *testing.T) {
	for name, expr := range map[string]string{
		"division by zero":         "divide(`1`, `0`)",
		"an unclosed bracket":      "[",
		"an unclosed filter":       "foo[?",
		"a bad literal":            "`{`",
		"an empty expression":      "",
		"invalid UTF-8":            "request.H\x80",
		"modulo of a string":       "modulo('a', `1`)",
		"too many arguments":       "to_upper('a', 'b')",
		"a missing argument":       "to_upper()",
		"an unknown function name": "frobnicate(@)",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Query(expr, doc); err == nil {
				t.Errorf("%q: no error", expr)
			}
		})
	}
}
