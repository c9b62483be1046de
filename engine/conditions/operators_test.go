package conditions

import (
	"encoding/json"
	"strings"
	"testing"
)

type opCase struct {
	key   any
	op    string
	value any
	want  bool
}

func runOps(t *testing.T, tests map[string]opCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Evaluate(tc.key, tc.op, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%#v %s %#v = %v, want %v", tc.key, tc.op, tc.value, got, tc.want)
			}
		})
	}
}

func TestEquals(t *testing.T) {
	runOps(t, map[string]opCase{
		"equal strings":                          {"a", "Equals", "a", true},
		"different strings":                      {"a", "Equals", "b", false},
		"a wildcard value":                       {"api.mycompany.com", "Equals", "*.mycompany.com", true},
		"a wildcard key is literal":              {"*", "Equals", "a", false},
		"a ? wildcard":                           {"ab", "Equals", "a?", true},
		"equal durations":                        {"1h", "Equals", "60m", true},
		"equal quantities":                       {"1Gi", "Equals", "1024Mi", true},
		"quantities of another scale":            {"1000m", "Equals", "1", true},
		"equal numbers of different types":       {int64(3), "Equals", float64(3), true},
		"a json.Number":                          {json.Number("3"), "Equals", 3, true},
		"a number and a numeric string":          {float64(3), "Equals", "3", true},
		"a numeric string and a number":          {"3", "Equals", float64(3), true},
		"seconds and a duration":                 {float64(3600), "Equals", "1h", true},
		"equal booleans":                         {true, "Equals", true, true},
		"a boolean and a string do not compare":  {true, "Equals", "true", false},
		"a string and a boolean do not compare":  {"true", "Equals", true, false},
		"null does not compare":                  {nil, "Equals", nil, false},
		"equal objects":                          {map[string]any{"a": int64(1)}, "Equals", map[string]any{"a": float64(1)}, true},
		"different objects":                      {map[string]any{"a": "1"}, "Equals", map[string]any{"a": "2"}, false},
		"equal lists":                            {[]any{"a", "b"}, "Equals", []any{"a", "b"}, true},
		"an empty string":                        {"", "Equals", "", true},
		"the operator name ignores case":         {"a", "equals", "a", true},
		"Equal is Equals":                        {"a", "Equal", "a", true},
		"NotEquals of different strings":         {"a", "NotEquals", "b", true},
		"NotEquals of equal strings":             {"a", "NotEquals", "a", false},
		"NotEquals with a wildcard":              {"x.mycompany.com", "NotEquals", "*.mycompany.com", false},
		"NotEquals of an empty string":           {"", "NotEquals", "DELETE", true},
		"NotEquals of kinds that do not compare": {true, "NotEquals", "false", true},
		"NotEquals of a string and a list":       {"CREATE", "NotEquals", []any{"DELETE"}, true},
		"NotEquals of a number and text":         {float64(1), "NotEquals", "one", true},
		"NotEquals of null":                      {nil, "NotEquals", "x", false},
		"NotEquals of numbers":                   {float64(1), "NotEquals", float64(2), true},
		"NotEqual is NotEquals":                  {"a", "NotEqual", "b", true},
		"NotEquals of different lists":           {[]any{"a"}, "NotEquals", []any{"b"}, true},
		"NotEquals of a list and a string":       {[]any{"a"}, "NotEquals", "a", true},
		"a quantity does not equal a pattern":    {"3", "Equals", "*", false},
		"a quantity NotEquals other text":        {"300Mi", "NotEquals", "", true},
		"a quantity NotEquals a pattern":         {"3", "NotEquals", "*", true},
		"an int NotEquals a fraction":            {int64(5), "NotEquals", 5.5, true},
	})
}

func TestNumericOperators(t *testing.T) {
	runOps(t, map[string]opCase{
		"numbers":                              {float64(3), "GreaterThan", float64(2), true},
		"ints":                                 {3, "GreaterThan", int64(3), false},
		"a number and a numeric string":        {float64(3), "GreaterThanOrEquals", "3", true},
		"a numeric string and a number":        {"10", "LessThan", float64(9), false},
		"quantities":                           {"1536Mi", "GreaterThan", "1Gi", true},
		"quantities of another scale":          {"250m", "LessThan", "1", true},
		"a quantity and a number":              {"2Gi", "GreaterThan", float64(1), true},
		"a number and a quantity":              {float64(1), "LessThan", "1Ki", true},
		"durations":                            {"90s", "GreaterThan", "1m", true},
		"durations as in time_since":           {"4381h0m0.5s", "GreaterThan", "4380h", true},
		"a duration and seconds":               {"2m", "LessThanOrEquals", float64(120), true},
		"seconds and a duration":               {float64(30), "LessThan", "1m", true},
		"versions":                             {"1.10.0", "GreaterThan", "1.9.0", true},
		"short versions compare as versions":   {"1.10", "GreaterThan", "1.9", true},
		"a lower version":                      {"1.2.3", "GreaterThanOrEquals", "1.10.0", false},
		"a division result":                    {float64(2.6), "GreaterThan", 2.5, true},
		"equal numbers are not greater":        {float64(2), "GreaterThan", float64(2), false},
		"equal numbers are at least equal":     {float64(2), "LessThanOrEquals", float64(2), true},
		"text does not compare":                {"abc", "GreaterThan", "abd", false},
		"null does not compare":                {nil, "LessThan", float64(1), false},
		"a list does not compare":              {[]any{float64(1)}, "GreaterThan", float64(0), false},
		"a boolean does not compare":           {true, "GreaterThan", false, false},
		"an empty string does not compare":     {"", "GreaterThan", float64(0), false},
		"Duration operators read durations":    {"2h", "DurationGreaterThan", "90m", true},
		"Duration operators read seconds":      {float64(30), "DurationLessThan", "1m", true},
		"Duration operators at equality":       {"1h", "DurationGreaterThanOrEquals", "60m", true},
		"Duration operators at most":           {"1h", "DurationLessThanOrEquals", "59m", false},
		"Duration operators refuse quantities": {"1Gi", "DurationGreaterThan", "1h", false},
	})
}

func TestUnknownOperatorIsAnError(t *testing.T) {
	_, err := Evaluate("a", "Matches", "a")
	if err == nil || !strings.Contains(err.Error(), `"Matches"`) {
		t.Errorf("error %v does not name the operator", err)
	}
}

func TestKnownOperatorIsWhatEvaluateAccepts(t *testing.T) {
	for _, name := range append(Operators(), "equals", "anynotin", "DURATIONLESSTHAN") {
		if !KnownOperator(name) {
			t.Errorf("%s: unknown, but Evaluate accepts it", name)
		}
		if _, err := Evaluate("a", name, "b"); err != nil {
			t.Errorf("%s: Evaluate: %v", name, err)
		}
	}
	for _, name := range []string{"", "Matches", "Equalz", "In "} {
		if KnownOperator(name) {
			t.Errorf("%q: known, but Evaluate refuses it", name)
		}
		if _, err := Evaluate("a", name, "b"); err == nil {
			t.Errorf("%q: Evaluate accepts it", name)
		}
	}
}
