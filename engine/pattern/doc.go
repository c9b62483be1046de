// Package pattern matches resources against Kyverno validate patterns
// (validate.pattern and validate.anyPattern) with Kyverno's documented
// semantics. It is pure: values in, a Result out, no I/O, no shared state;
// every function is safe for concurrent use and never modifies its inputs.
//
// Resources and patterns use the JSON data model: map[string]any, []any,
// string, bool, nil, and numbers as float64, int64, int, json.Number or any
// other Go integer or float type.
//
// # Objects and lists
//
// Every key of a pattern object must hold in the resource; keys the pattern
// does not name are not checked. A missing key fails unless its pattern
// accepts nothing (null or ""). An object pattern of one element applies to
// every element of a resource list; an empty resource list passes. As in
// Kyverno, only the first element of a list pattern counts when it is an
// object or a scalar (a known Kyverno limitation); nested lists are compared
// element by element. A scalar pattern against a resource list must be
// matched by every element.
//
// # Values
//
// See MatchValue: wildcards ('*' any sequence, '?' one character, "?*"
// non-empty), alternatives '|' and conjunctions '&', the operators ">",
// ">=", "<", "<=" and "!", ranges "a-b" and "a!-b", and comparison of
// numbers, Kubernetes quantities ("512Mi", "100m"), durations ("90m") and,
// for ordering operators, semantic versions. The pattern "*" requires the
// field to exist, with any value.
//
// # Anchors
//
//   - (key) conditional: if the key is present and its value matches, the
//     sibling keys apply; otherwise the enclosing object is skipped.
//   - <(key) global: like a conditional anchor, but its skip decides the
//     whole rule whatever happens elsewhere. On an absent key it holds (as
//     in Kyverno): the siblings apply.
//   - =(key) equality: if the key is present, its value must match.
//   - X(key) negation: the key must be absent; its value is not read.
//   - ^(key) existence: the value is a list in which each element of the
//     pattern list matches at least one element (objects or scalars).
//   - +(key) add-if-not-present: only meaningful to mutate rules; ignored.
//
// In a list, elements skipped by their anchors do not count: the list passes
// if the others pass and is skipped only if every element was skipped. So a
// Pod whose istio-init container is excluded by a conditional anchor passes
// when its other containers do. In an object, such a skip under a plain key
// (env: [{(name): X, ...}] with no env entry named X) skips the object, as
// Kyverno does; under an anchored key (=(initContainers)) it leaves the
// decision to the sibling keys present in the resource, and the object is
// skipped only when none of them applied, with the reasons of every skipped
// anchored key joined. So a Pod whose only init container is excluded
// passes or fails on its containers.
//
// In metadata labels and annotations, pattern keys may contain wildcards
// ("X(fluxcd.io/*)"); such a key applies to every resource key it matches.
//
// # Decisions and paths
//
// When several keys of an object do not pass, the decision is, in order: a
// skip from a global anchor; a failure under an anchor; a skip under a plain
// key; a failure of a plain key; the skips under anchored keys. Ties go to the smallest key,
// list elements are taken in order. This is Kyverno's evaluation order
// (anchors, then keys holding anchors, then the rest) made deterministic, so
// a Result never depends on map iteration order.
//
// Result.Path is in Kyverno's form ("/spec/containers/0/securityContext/
// privileged/"). Messages are Kyverno's, which the engine reports as they
// are for skips ("conditional anchor mismatch: resource value 'NodePort'
// does not match 'ExternalName' at path /spec/type/", the reasons of a
// list's skipped elements joined with "; "): like Kyverno's, they quote
// the resource's value.
//
// Check reports patterns that can never be evaluated meaningfully, so that a
// policy using one can be rejected when it is loaded.
package pattern
