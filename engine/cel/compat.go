package cel

import (
	celgo "github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
)

// compileCompat compiles an expression as Kubernetes 1.35's API server (on
// cel-go v0.26) and Kyverno 1.19 do, on the newer cel-go tally is built with
// (v0.29 and later build each evaluation's cost tracker once per program
// instead of once per evaluation: most of the CPU of an evaluation).
//
// One behaviour changed between them: `x.orValue(d)` where x is not an
// optional (a field read without `?`, typed dyn) returned x on v0.26 and is
// an error ("no such overload") from v0.29. Policies rely on the old one
// (`c.securityContext.capabilities.add.orValue([])` in Kyverno's own
// library). Such calls are compiled as `optional.of(x).orValue(d)`, which
// gives x whatever it is, as v0.26 did; calls on a real optional are left
// as they are.
func compileCompat(env *celgo.Env, text string) (*celgo.Ast, *celgo.Issues) {
	checked, issues := env.Compile(text)
	if issues != nil && issues.Err() != nil {
		return checked, issues
	}
	targets := nonOptionalOrValueTargets(checked.NativeRep())
	if len(targets) == 0 {
		return checked, issues
	}
	parsed, issues := env.Parse(text)
	if issues != nil && issues.Err() != nil {
		return checked, nil // parsed once already: cannot fail; keep the checked one
	}
	native := parsed.NativeRep()
	next := celast.MaxID(native)
	fac := celast.NewExprFactory()
	for _, nav := range celast.MatchDescendants(celast.NavigateAST(native), func(e celast.NavigableExpr) bool { return targets[e.ID()] }) {
		target := nav.(celast.Expr)
		inner := fac.CopyExpr(target)
		inner.RenumberIDs(func(int64) int64 { next++; return next })
		next++
		target.SetKindCase(fac.NewCall(next, "optional.of", inner))
	}
	rechecked, issues := env.Check(parsed)
	if issues != nil && issues.Err() != nil {
		return checked, nil // the rewrite does not type-check: keep the plain expression
	}
	return rechecked, issues
}

// nonOptionalOrValueTargets are the IDs of the receivers of orValue calls
// whose checked type is not an optional.
func nonOptionalOrValueTargets(a *celast.AST) map[int64]bool {
	out := map[int64]bool{}
	for _, call := range celast.MatchDescendants(celast.NavigateAST(a), celast.FunctionMatcher("orValue")) {
		c := call.AsCall()
		if !c.IsMemberFunction() || len(c.Args()) != 1 {
			continue
		}
		t := c.Target()
		if makesOptional(t) {
			continue // an optional however it is typed (`m[?k]` on dyn is typed dyn)
		}
		if typ := a.GetType(t.ID()); typ != nil && typ.TypeName() != "optional_type" {
			out[t.ID()] = true
		}
	}
	return out
}

// optionalMakers are the functions whose result is an optional.
var optionalMakers = map[string]bool{
	"_[?_]": true, "_?._": true, "optional.of": true, "optional.ofNonZeroValue": true,
	"optional.none": true, "or": true, "optMap": true, "optFlatMap": true,
}

// makesOptional says whether an expression is written to give an optional.
func makesOptional(e celast.Expr) bool {
	return e.Kind() == celast.CallKind && optionalMakers[e.AsCall().FunctionName()]
}
