package cel

import (
	"errors"
	"fmt"

	apiservercel "k8s.io/apiserver/pkg/cel"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// Spec is what a policy gives to compile: its variables, match conditions,
// validations and audit annotations, in the mode of its kind.
type Spec struct {
	Mode Mode
	// Namespaced declares the resource library of a namespaced policy, as
	// Kyverno's (its sdk's namespacedEnv): resource.Get(apiVersion,
	// resource, name) and resource.List(apiVersion, resource), the
	// namespace being the policy's own; a cluster-wide policy's take a
	// namespace argument.
	Namespaced bool
	// HasParams declares `params` (ModeKubernetes only).
	HasParams        bool
	Variables        []admissionregistrationv1.Variable
	MatchConditions  []admissionregistrationv1.MatchCondition
	Validations      []admissionregistrationv1.Validation
	AuditAnnotations []admissionregistrationv1.AuditAnnotation
	// Extras are further named expressions of any type, evaluated on their
	// own (Program.Extra): an ImageValidatingPolicy's image extractors and
	// attestor expressions.
	Extras []admissionregistrationv1.Variable
}

// Program is a compiled Spec. It is immutable and safe for concurrent use.
// An expression that did not compile keeps its error (Errors lists them);
// the policy kind decides whether that refuses the policy or shows in its
// results.
type Program struct {
	mode        Mode
	composeEnv  *plugincel.CompositionEnv
	variables   []*expression
	conditions  []*expression
	validations []validation
	annotations []annotation
	extras      []*expression
	// varIndex and varType are what each evaluation's `variables`
	// (varMap) shares: the variables' positions by name, and the CEL type.
	varIndex map[string]int
	// escIndex is varIndex by the escaped name expressions use
	// (`variables.__namespace__`), so that reading a variable needs no
	// unescaping.
	escIndex map[string]int
	varType  *types.Type
}

// expression is one compiled expression; prog is nil when err is set.
type expression struct {
	name string // of a variable, condition or audit annotation
	text string
	prog celgo.Program
	err  error
	// outputType is the checked type (a variable's type for those after it).
	outputType *celgo.Type
}

type validation struct {
	check      *expression
	message    string
	messageExp *expression // nil without messageExpression
}

type annotation struct {
	key   string
	value *expression
}

// CompileError is an expression that did not compile: where it is
// (spec.validations[0].expression) and the compiler's message.
type CompileError struct {
	Path, Message string
}

func (e *CompileError) Error() string { return e.Path + ": " + e.Message }

// Compile compiles every expression of a spec. The error joins every
// CompileError; the Program is returned all the same (nil only when the
// environment itself could not be built).
func Compile(spec Spec) (*Program, error) {
	base, err := envSet(envKey{mode: spec.Mode, hasParams: spec.HasParams, namespaced: spec.Namespaced && spec.Mode.kyverno()})
	if err != nil {
		return nil, err
	}
	compose, err := plugincel.NewCompositionEnv(plugincel.VariablesTypeName, base)
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	p := &Program{mode: spec.Mode, composeEnv: compose}
	var errs []error
	add := func(path string, e *expression) *expression {
		if e.err != nil {
			errs = append(errs, &CompileError{Path: path, Message: e.err.Error()})
		}
		return e
	}
	// Variables first, in order: each one's type is known to those after it.
	for i, v := range spec.Variables {
		e := add(fmt.Sprintf("variables[%d].expression", i), p.compile(v.Name, v.Expression, celgo.AnyType))
		typ := celgo.DynType
		if e.err == nil {
			typ = e.outputType
		}
		compose.AddField(v.Name, typ)
		p.variables = append(p.variables, e)
	}
	for i, c := range spec.MatchConditions {
		p.conditions = append(p.conditions, add(fmt.Sprintf("matchConditions[%d].expression", i), p.compile(c.Name, c.Expression, celgo.BoolType)))
	}
	check := []*celgo.Type{celgo.BoolType}
	switch spec.Mode {
	case ModeEnvoy:
		check = []*celgo.Type{envoyResponseType, celgo.NullType}
	case ModeHTTP:
		check = []*celgo.Type{httpResponseType, celgo.NullType}
	}
	for i, v := range spec.Validations {
		val := validation{
			check:   add(fmt.Sprintf("validations[%d].expression", i), p.compile("", v.Expression, check...)),
			message: v.Message,
		}
		if v.MessageExpression != "" {
			val.messageExp = add(fmt.Sprintf("validations[%d].messageExpression", i), p.compile("", v.MessageExpression, celgo.StringType))
		}
		p.validations = append(p.validations, val)
	}
	for i, a := range spec.AuditAnnotations {
		p.annotations = append(p.annotations, annotation{
			key:   a.Key,
			value: add(fmt.Sprintf("auditAnnotations[%d].valueExpression", i), p.compile(a.Key, a.ValueExpression, celgo.StringType, celgo.NullType)),
		})
	}
	for i, x := range spec.Extras {
		p.extras = append(p.extras, add(fmt.Sprintf("extras[%d] (%s)", i, x.Name), p.compile(x.Name, x.Expression, celgo.AnyType)))
	}
	p.varType = types.NewTypeValue(compose.MapType.TypeName(), traits.IndexerType|traits.FieldTesterType|traits.IterableType)
	p.varIndex = make(map[string]int, len(p.variables))
	p.escIndex = make(map[string]int, len(p.variables))
	for i, v := range p.variables {
		p.varIndex[v.name] = i
		if esc, ok := apiservercel.Escape(v.name); ok {
			p.escIndex[esc] = i
		}
	}
	return p, errors.Join(errs...)
}

// compile compiles one expression, checking its type as the API server
// does ("must evaluate to bool"); AnyType accepts every type.
func (p *Program) compile(name, text string, want ...*celgo.Type) *expression {
	e := &expression{name: name, text: text}
	env, err := p.composeEnv.Env(environment.StoredExpressions)
	if err != nil {
		e.err = fmt.Errorf("cel environment: %w", err)
		return e
	}
	ast, issues := compileCompat(env, text)
	if issues != nil && issues.Err() != nil {
		e.err = errors.New("compilation failed: " + issues.String())
		return e
	}
	ok := false
	for _, t := range want {
		if t == celgo.AnyType || ast.OutputType().IsExactType(t) {
			ok = true
			break
		}
	}
	if !ok {
		if len(want) == 1 {
			e.err = fmt.Errorf("must evaluate to %v but got %v", want[0], ast.OutputType())
		} else {
			e.err = fmt.Errorf("must evaluate to one of %v but got %v", want, ast.OutputType())
		}
		return e
	}
	e.outputType = ast.OutputType()
	e.prog, err = env.Program(ast,
		celgo.CostLimit(celconfig.PerCallLimit),
		celgo.InterruptCheckFrequency(celconfig.CheckFrequency),
	)
	if err != nil {
		e.err = fmt.Errorf("program instantiation failed: %w", err)
	}
	return e
}

// Errors lists the expressions that did not compile.
func (p *Program) Errors() []error {
	var out []error
	for _, group := range [][]*expression{p.variables, p.conditions} {
		for _, e := range group {
			if e.err != nil {
				out = append(out, e.err)
			}
		}
	}
	for _, v := range p.validations {
		for _, e := range []*expression{v.check, v.messageExp} {
			if e != nil && e.err != nil {
				out = append(out, e.err)
			}
		}
	}
	for _, a := range p.annotations {
		if a.value.err != nil {
			out = append(out, a.value.err)
		}
	}
	for _, x := range p.extras {
		if x.err != nil {
			out = append(out, x.err)
		}
	}
	return out
}

// Validations is the number of validations.
func (p *Program) Validations() int { return len(p.validations) }

// Expression is the text of validation i.
func (p *Program) Expression(i int) string { return p.validations[i].check.text }

// Message is the static message of validation i.
func (p *Program) Message(i int) string { return p.validations[i].message }
