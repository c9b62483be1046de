// Package variables resolves Kyverno's variables: "{{ expr }}" JMESPath
// expressions (the jmespath-community dialect plus Kyverno's custom
// functions, see FunctionNames) evaluated against a JSON document such as
// {"request": {"object": ..., "operation": ...}, "element": ..., <context
// entries>}, and "$(./relative/path)" references to other fields of a
// pattern (ResolveReferences).
//
// Missing variables. Kyverno's JMESPath reports a map key that is not there
// as an error ("Unknown key") but a null on the way as null. Substitute
// follows it:
//   - Strict mode (patterns, messages, context entries): a variable whose
//     path is missing from the data is an error wrapping ErrUnresolved
//     ("failed to resolve request.object.foo at path : JMESPath query
//     failed: Unknown key "foo" in path"), and so is an
//     expression that fails (a function given the wrong type); Kyverno
//     reports such a rule as an error, "variable substitution failed".
//     A path that exists and holds null, or an expression that yields null
//     (`containers[?name=='x'] | [0]`), substitutes null.
//     Conditions (preconditions, deny) use Strict mode too, as Kyverno's
//     condition resolver does since it stopped substituting "".
//   - Lenient mode: both become the empty string (Kyverno's former
//     condition resolver), so that `key: "{{ a.missing }}" operator:
//     NotEquals value: x` holds.
//     A malformed expression stays an error in both modes: a policy with one
//     should be rejected, not silently evaluated.
//
// Missing keys are told from nulls for simple paths (a.b[0]."c.d"), alone
// or as the last alternative of an "||"; other expressions yielding null are
// taken as null. A variable nothing defines (a name read from the top of the
// data that the data lacks: not request, element, a context entry, a value)
// is an error wherever the expression reads it ("{{ tier == 'gold' }}"),
// but on the left of an "||", whose right side is then the default.
//
// Numbers in the data may be float64, int, int64 or json.Number; the
// interpreter only knows float64, so expressions that compare, compute or
// call functions read a normalized copy (made once per Substitute call;
// normalized data costs a walk and no copy), while plain paths read the data
// as it is and return its values unchanged. Compiled expressions are cached (bounded),
// so a variable costs one search after its first use.
package variables
