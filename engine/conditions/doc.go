// Package conditions evaluates Kyverno conditions (preconditions, deny
// conditions, PolicyException and foreach conditions): {key, operator,
// value} triples grouped as {any: [...], all: [...]}, as a list of such
// groups, or as a plain list that must all hold.
//
// Variables in keys, values and messages are substituted first, leniently:
// a variable Kyverno cannot resolve in a condition (a missing field, a
// failing function) becomes the empty string, so that `{{ a.missing }}
// NotEquals ""` holds and `Equals "x"` does not. A field that exists and is
// null stays null, and most operators are false for null. Malformed
// expressions are errors.
//
// Operators follow Kyverno's documented semantics; names are matched without
// regard to case, and "Equal"/"NotEqual" are accepted for Equals/NotEquals:
//   - Equals, NotEquals: one key against one value. Strings compare as
//     durations when both are durations ("1h" = "60m"), then as quantities
//     ("1Gi" = "1024Mi"), then with the value's wildcards ("*", "?");
//     numbers by value (a numeric string reads as a number); booleans,
//     objects and lists exactly. Values of kinds that cannot be compared
//     (a boolean and a string, null) make both Equals and NotEquals false.
//   - AnyIn, AllIn, AnyNotIn, AllNotIn (and the deprecated In = AllIn,
//     NotIn = AnyNotIn): the key is a scalar or a list; the value a list, a
//     JSON list in a string ('["a", "b"]', as ConfigMap data often is), or a
//     string of comma-separated entries. Entries match as strings with
//     wildcards either way, as equal numbers, or as ranges ("1-10" holds
//     1 to 10, "1!-10" what is outside). A null or non-string scalar value
//     makes every set operator false. An empty key list is in every set
//     (AllIn and AllNotIn hold, AnyIn and AnyNotIn do not).
//   - GreaterThan, GreaterThanOrEquals, LessThan, LessThanOrEquals: numbers,
//     numeric strings, durations ("1h", numbers as seconds), quantities
//     ("1Gi") and versions ("1.2.3"), tried in that order.
//   - DurationGreaterThan, DurationGreaterThanOrEquals, DurationLessThan,
//     DurationLessThanOrEquals (deprecated): durations only.
//
// Unknown operators are errors naming the operator.
package conditions
