package engine

import (
	"fmt"
	"strconv"
	"strings"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	"github.com/tally-dev/tally/engine/cel"
	"github.com/tally-dev/tally/internal/tenant"
)

// LabelExceptionPriority orders the exceptions that exempt a resource: the
// highest decides the reported result.
const LabelExceptionPriority = "polex.kyverno.io/priority"

// CELException is a compiled policies.kyverno.io PolicyException, which
// exempts resources from ValidatingPolicies.
type CELException struct {
	// Key is "<namespace>/<name>" (as messages name it); ObjectName the name
	// alone (as the exceptions property lists it).
	Key, ObjectName string
	Priority        int
	Spec            policiesv1.PolicyExceptionSpec
	// Reach: see Exception.Reach.
	Reach string
	// prog holds the match conditions (nil: none, the exception always applies).
	prog *cel.Program
}

// CompileCELException compiles a CEL PolicyException's match conditions.
func CompileCELException(pe *policiesv1.PolicyException) (*CELException, error) {
	x := &CELException{Key: pe.Namespace + "/" + pe.Name, ObjectName: pe.Name, Spec: pe.Spec}
	if pe.Namespace == "" {
		x.Key = pe.Name
	}
	if len(pe.Spec.PolicyRefs) == 0 {
		return nil, fmt.Errorf("exception %s: spec.policyRefs is empty", x.Key)
	}
	if p, ok := pe.Labels[LabelExceptionPriority]; ok {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("exception %s: label %s: %w", x.Key, LabelExceptionPriority, err)
		}
		x.Priority = n
	}
	if len(pe.Spec.MatchConditions) > 0 {
		prog, err := cel.Compile(cel.Spec{Mode: cel.ModeKyverno, MatchConditions: pe.Spec.MatchConditions})
		if err != nil {
			return nil, fmt.Errorf("exception %s: %w", x.Key, err)
		}
		x.prog = prog
	}
	return x, nil
}

// Refers reports whether the exception names a policy of that kind.
func (x *CELException) Refers(p *Policy, kind string) bool {
	name := p.Name
	if _, plain, ok := strings.Cut(name, "/"); ok {
		name = plain
	}
	for _, ref := range x.Spec.PolicyRefs {
		if ref.Name == name && ref.Kind == kind {
			return true
		}
	}
	return false
}

// applies evaluates the exception's match conditions on the request.
func (x *CELException) applies(e *evaluation, in *cel.Input) (bool, error) {
	if x.Reach != "" && e.res.Namespace != x.Reach {
		return false, nil
	}
	if x.prog == nil {
		return true, nil
	}
	ctx := e.ctx
	if ns, _, ok := strings.Cut(x.Key, "/"); ok && ns != "" && in.Data != nil {
		// A PolicyException is namespaced: its conditions' resource calls
		// read only its own namespace (R47), with its namespace's identity.
		copied := *in
		copied.OwnNamespace = ns
		in = &copied
		ctx = tenant.With(ctx, ns)
	}
	o := x.prog.Evaluate(ctx, in)
	if o.ConditionErr != nil {
		return false, o.ConditionErr
	}
	return !o.NotMet, nil
}

// partial reports whether the exception only allows images or values
// instead of exempting the resource.
func (x *CELException) partial() bool {
	return len(x.Spec.Images) > 0 || len(x.Spec.AllowedValues) > 0
}
