// Package conditions evaluates Kyverno conditions (preconditions, deny
// conditions, PolicyException and foreach conditions): {key, operator,
// value} triples grouped as {any: [...], all: [...]}, as a list of such
// groups, or as a plain list that must all hold.
//
// Variables in keys, values and messages are substituted first, strictly,
// as Kyverno does: a variable that cannot be resolved (a missing field,
// "Unknown key"; a function given the wrong type or malformed input) makes
// the conditions an error, "failed to substitute variables in condition
// key: ...", which the engine reports as an error result. A default value
// (`{{ a.missing || 'none' }}`) is the way to read an optional field. A field
// that exists and is null stays null, and most operators are false for
// null. Malformed expressions are errors.
//
// Operators follow Kyverno's documented semantics; names are matched without
// regard to case, and "Equal"/"NotEqual" are accepted for Equals/NotEquals:
//   - Equals, NotEquals: one key against one value. Strings compare as
//     durations when both are durations ("1h" = "60m"), then as quantities
//     ("1Gi" = "1024Mi"; a key that reads as a quantity, such as "3",
//     equals nothing else, not even a pattern), then with the value's
//     wildcards ("*", "?");
//     numbers by value (a numeric string reads as a number); booleans,
//     objects and lists exactly. Values of kinds that cannot be compared
//     (a boolean and a string, a string and a list) make Equals false and
//     NotEquals true; a null key makes both false.
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
