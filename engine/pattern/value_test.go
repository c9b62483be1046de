package pattern

import (
	"encoding/json"
	"testing"
)

func TestMatchValue(t *testing.T) {
	tests := map[string]struct {
		value, pattern any
		want           bool
	}{
		// Plain strings and wildcards.
		"an equal string matches":                  {"production", "production", true},
		"a different string does not match":        {"development", "production", false},
		"* matches any sequence":                   {"nginx:1.25", "nginx:*", true},
		"* matches the empty string":               {"", "*", true},
		"* does not match a missing value":         {nil, "*", false},
		"* matches an object":                      {map[string]any{"a": 1}, "*", true},
		"* matches a list":                         {[]any{}, "*", true},
		"? matches exactly one character":          {"v1", "v?", true},
		"? does not match two characters":          {"v10", "v?", false},
		"? does not match nothing":                 {"v", "v?", false},
		"? matches one multi-byte character":       {"é", "?", true},
		"?* requires a non-empty value":            {"", "?*", false},
		"?* matches a non-empty value":             {"x", "?*", true},
		"*? also requires a non-empty value":       {"", "*?", false},
		"?* does not match a missing value":        {nil, "?*", false},
		"?* does not match an object":              {map[string]any{}, "?*", false},
		"a wildcard inside a path":                 {"/var/run/docker.sock", "/var/run/*.sock", true},
		"a wildcard matches a rendered number":     {float64(1000), "1*", true},
		"a string pattern matches a boolean":       {false, "false", true},
		"a string pattern rejects another boolean": {true, "false", false},
		"a string pattern matches an integer":      {int64(3), "3", true},

		// An operator without operand (">="), which Kyverno accepts in a policy.
		"an operator without operand matches no string":   {"admin", ">=", false},
		"an operator without operand matches no number":   {int64(5), ">=", false},
		"an operator without operand matches no quantity": {"100Mi", "<", false},
		"an operator without operand matches no empty":    {"", ">=", false},
		"an operator without operand matches itself":      {">=", ">=", true},

		// Empty and null patterns.
		"an empty pattern matches a missing value":  {nil, "", true},
		"an empty pattern matches an empty string":  {"", "", true},
		"an empty pattern rejects a value":          {"x", "", false},
		"a null pattern matches a missing value":    {nil, nil, true},
		"a null pattern matches false":              {false, nil, true},
		"a null pattern matches zero":               {int64(0), nil, true},
		"a null pattern matches an empty string":    {"", nil, true},
		"a null pattern rejects a value":            {"x", nil, false},
		"a null pattern rejects an object":          {map[string]any{}, nil, false},
		"the string null is not the null pattern":   {nil, "null", false},
		"the string null matches the string null":   {"null", "null", true},
		"a null pattern matches a json.Number zero": {json.Number("0"), nil, true},

		// Booleans and numbers.
		"a bool pattern matches the same bool":             {true, true, true},
		"a bool pattern rejects the string true":           {"true", true, false},
		"a bool pattern rejects a missing value":           {nil, false, false},
		"an int pattern matches a float value":             {float64(3), int64(3), true},
		"a float pattern matches an int value":             {int64(3), float64(3), true},
		"a float pattern rejects a fractional value":       {3.5, float64(3), false},
		"a number pattern matches a numeric string":        {"1000", float64(1000), true},
		"a number pattern rejects a non-numeric string":    {"a lot", float64(1000), false},
		"a number pattern matches a json.Number":           {json.Number("2.5"), 2.5, true},
		"a json.Number pattern matches an int":             {7, json.Number("7"), true},
		"a number pattern rejects a missing value":         {nil, float64(0), false},
		"large integers are compared exactly":              {int64(9007199254740993), int64(9007199254740992), false},
		"an unsigned integer matches":                      {uint64(5), int64(5), true},
		"an unsigned integer beyond int64 matches a float": {uint64(1 << 63), float64(1 << 63), true},
		"a list pattern is not a scalar pattern":           {[]any{"a"}, []any{"a"}, false},

		// Operators.
		"> compares numbers":                  {int64(1000), ">0", true},
		"> is strict":                         {int64(0), ">0", false},
		">= accepts equality":                 {float64(2), ">=2", true},
		"< compares a numeric string":         {"4.5", "<5", true},
		"<= with spaces after the operator":   {int64(5), "<= 5", true},
		"an ordering operator rejects a word": {"many", ">1", false},
		"an ordering operator rejects a missing value": {
			nil, ">0", false,
		},
		"! negates a string":                        {"default", "!default", false},
		"! accepts another string":                  {"prod", "!default", true},
		"! negates a wildcard":                      {"nginx:latest", "!*:latest", false},
		"! still requires a value":                  {nil, "!default", false},
		"! rejects an object":                       {map[string]any{}, "!x", false},
		"! compares numbers by value":               {float64(0), "!0", false},
		"a lone operator is a plain value":          {">", ">", true},
		"| accepts any alternative":                 {"Localhost", "RuntimeDefault | Localhost", true},
		"| rejects other values":                    {"Unconfined", "RuntimeDefault | Localhost", false},
		"| without spaces":                          {"silver", "gold|silver|bronze|none", true},
		"& requires every condition":                {"5.10.84-1", "!5.10.84-1 & !5.15.5-2", false},
		"& accepts a value meeting every condition": {"6.1.0", "!5.10.84-1 & !5.15.5-2", true},
		"& binds tighter than |":                    {int64(7), ">5 & <10 | 0", true},
		"& binds tighter than | (the other branch)": {int64(0), ">5 & <10 | 0", true},
		"a wildcard alternative":                    {"https://github.com/fluxcd/flux2", "https://github.com/fluxcd/?* | ssh://git@github.com:fluxcd/?*", true},

		// Ranges.
		"a range includes its lower bound":       {int64(1), "1-10", true},
		"a range includes its upper bound":       {int64(10), "1-10", true},
		"a range excludes values above":          {int64(11), "1-10", false},
		"a negated range excludes values inside": {int64(5), "1!-10", false},
		"a negated range accepts values outside": {int64(0), "1!-10", true},
		"a range of negative numbers":            {"-9", "-10--8", true},
		"a range of negative numbers excludes":   {"-15", "-10--8", false},
		"a range with explicit signs":            {"3", "+2-+4", true},
		"a range of decimals":                    {"2.7", "2.5-3.5", true},
		"a range with a negative lower bound":    {"4", "-2-5", true},
		"a range of quantities":                  {"1536Mi", "1Gi-2Gi", true},
		"a negated range of quantities":          {"98Mi", "100Mi!-1024Mi", true},
		"a negated range rejects a value inside": {"512Mi", "100Mi!-1024Mi", false},
		"ranges as alternatives":                 {int64(550), "100-200 | 500-600", true},
		"a range rejects a word":                 {"abc", "1-10", false},
		"a range rejects a missing value":        {nil, "1-10", false},
		"a date is not a range":                  {"2024-01-01", "2024-01-01", true},
		"a version with a dash is not a range":   {"5.10.84-1", "5.10.84-1", true},
		"a range of durations":                   {"90m", "1h-2h", true},

		// Quantities.
		"<= compares quantities":                   {"512Mi", "<=1Gi", true},
		"<= rejects a larger quantity":             {"2Gi", "<=1Gi", false},
		"equal quantities in other units":          {"0.1", "100m", true},
		"a millicore quantity against a plain one": {"1500m", ">1", true},
		"a number against a quantity":              {int64(2048), "2Ki", true},
		"a fractional number against a quantity":   {0.5, "<1", true},
		"an invalid quantity in the resource":      {"lots", "<=1Gi", false},

		// Durations.
		"> compares durations":                       {"90m", ">1h", true},
		"> rejects a shorter duration":               {"30m", ">1h", false},
		"<= compares compound durations":             {"1h", "<=1h30m", true},
		"equal durations in other units":             {"60m", "1h", true},
		"a quantity and a duration are not compared": {"1Gi", ">1h", false},

		// Semantic versions (ordering operators only).
		"> compares versions":               {"1.10.0", ">1.4.1", true},
		"> rejects an older version":        {"1.4.0", ">1.4.1", false},
		"a pre-release ranks below release": {"1.0.0-rc.1", "<1.0.0", true},
		"pre-release identifiers compare numerically": {
			"1.0.0-rc.10", ">1.0.0-rc.2", true,
		},
		"a v prefix is accepted": {"v2.0.0", ">=1.9.9", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := MatchValue(tc.value, tc.pattern); got != tc.want {
				t.Errorf("MatchValue(%#v, %#v) = %v, want %v", tc.value, tc.pattern, got, tc.want)
			}
		})
	}
}
