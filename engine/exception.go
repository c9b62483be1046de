package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	"github.com/tally-dev/tally/engine/conditions"
	"github.com/tally-dev/tally/engine/match"
	"github.com/tally-dev/tally/engine/podsecurity"
	"github.com/tally-dev/tally/engine/wildcard"
)

// Exception is a compiled PolicyException.
type Exception struct {
	// Name is "<namespace>/<name>" (the exception's key, as skip messages
	// spell it).
	Name string
	// ObjectName is metadata.name (as the exceptions property of a report
	// result lists it).
	ObjectName string
	Spec       kyvernov2.PolicyExceptionSpec
	// Reach, when set, is the one namespace whose resources the exception
	// may exempt (ExceptionReach): a tenant's exception exempts nothing of
	// another namespace, nor anything cluster-scoped.
	Reach      string
	matcher    *match.Matcher
	conditions any

	// psCache holds, per podSecurity rule, the rule's check with this
	// exception's control exclusions added (*podsecurity.Compiled or error).
	psCache sync.Map
}

// CompileException compiles a PolicyException.
func CompileException(pe *kyvernov2.PolicyException) (*Exception, error) {
	ex := &Exception{Name: pe.Namespace + "/" + pe.Name, ObjectName: pe.Name, Spec: pe.Spec}
	if pe.Namespace == "" {
		ex.Name = pe.Name
	}
	if pe.Spec.Conditions != nil {
		data, err := json.Marshal(pe.Spec.Conditions)
		if err != nil {
			return nil, fmt.Errorf("exception %s: conditions: %w", ex.Name, err)
		}
		if err := json.Unmarshal(data, &ex.conditions); err != nil {
			return nil, fmt.Errorf("exception %s: conditions: %w", ex.Name, err)
		}
	}
	var err error
	if ex.matcher, err = match.Compile(pe.Spec.Match, nil); err != nil {
		return nil, fmt.Errorf("exception %s: %w", ex.Name, err)
	}
	if len(pe.Spec.Exceptions) == 0 {
		return nil, fmt.Errorf("exception %s: spec.exceptions is empty", ex.Name)
	}
	return ex, nil
}

// Covers reports whether the exception names the policy and rule. Policy and
// rule names may use wildcards.
func (x *Exception) Covers(policy, rule string) bool {
	for _, e := range x.Spec.Exceptions {
		if !wildcard.Match(e.PolicyName, policy) {
			continue
		}
		for _, r := range e.RuleNames {
			if wildcard.Match(r, rule) {
				return true
			}
		}
	}
	return false
}

// exceptionsFor returns the exceptions that exempt the subject from the rule.
func (e *evaluation) exceptionsFor(rule *Rule, data map[string]any) []*Exception {
	var out []*Exception
	for _, x := range e.req.Exceptions {
		if e.req.Background && !x.Spec.BackgroundEnabled() {
			continue
		}
		if !x.Covers(e.policy.Name, rule.Name) {
			continue
		}
		if len(x.Spec.PodSecurity) > 0 && rule.podSecurity != nil {
			continue // applied as extra exclusions of the podSecurity check
		}
		if x.applies(e, data) {
			out = append(out, x)
		}
	}
	return out
}

// applies reports whether the exception's match and conditions select the
// subject of the evaluation.
func (x *Exception) applies(e *evaluation, data map[string]any) bool {
	if x.Reach != "" && e.res.Namespace != x.Reach {
		return false
	}
	if !x.matcher.Matches(&e.res, e.req.NamespaceLabels, e.adm) {
		return false
	}
	if x.conditions != nil {
		ok, _, err := conditions.AnyAll(x.conditions, data, conditions.Preconditions)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

// podSecurityExceptions returns the exceptions with podSecurity control lists
// that cover the rule and select the subject.
func (e *evaluation) podSecurityExceptions(rule *Rule, data map[string]any) []*Exception {
	var out []*Exception
	for _, x := range e.req.Exceptions {
		if len(x.Spec.PodSecurity) == 0 || (e.req.Background && !x.Spec.BackgroundEnabled()) {
			continue
		}
		if x.Covers(e.policy.Name, rule.Name) && x.applies(e, data) {
			out = append(out, x)
		}
	}
	return out
}

// withExclusions returns the rule's podSecurity check with the exclusions of
// the exceptions added, compiled once per rule (and per set of exceptions
// when there are several, which is rare: those are not cached).
func withExclusions(rule *Rule, xs []*Exception) (*podsecurity.Compiled, error) {
	if len(xs) == 1 {
		return xs[0].withExclusions(rule)
	}
	var extra []kyvernov1.PodSecurityStandard
	for _, x := range xs {
		extra = append(extra, x.Spec.PodSecurity...)
	}
	c, err := rule.podSecurity.WithExclusions(extra)
	if err != nil {
		return nil, fmt.Errorf("exceptions %s: podSecurity: %w", exceptionKeys(xs), err)
	}
	return c, nil
}

func exceptionKeys(xs []*Exception) string {
	keys := make([]string, len(xs))
	for i, x := range xs {
		keys[i] = x.Name
	}
	return strings.Join(keys, ", ")
}

// withExclusions returns the rule's podSecurity check with the exception's
// control exclusions added, compiled once per rule.
func (x *Exception) withExclusions(rule *Rule) (*podsecurity.Compiled, error) {
	if v, ok := x.psCache.Load(rule); ok {
		if err, bad := v.(error); bad {
			return nil, err
		}
		return v.(*podsecurity.Compiled), nil
	}
	c, err := rule.podSecurity.WithExclusions(x.Spec.PodSecurity)
	if err != nil {
		err = fmt.Errorf("exception %s: podSecurity: %w", x.Name, err)
		x.psCache.Store(rule, err)
		return nil, err
	}
	x.psCache.Store(rule, c)
	return c, nil
}

// ExceptionScope says which PolicyExceptions apply, and where (R47).
type ExceptionScope struct {
	// Namespace, when set (not "*"), is the one namespace exceptions are
	// taken from, as Kyverno's --exceptionNamespace; its exceptions reach
	// every namespace.
	Namespace string
	// Wide are the other namespaces whose exceptions reach every
	// namespace ("*": all of them, Kyverno's default). An exception of any
	// other namespace exempts only resources of its own namespace.
	Wide []string
}

// Allowed says whether a PolicyException of namespace ns applies at all.
func (s ExceptionScope) Allowed(ns string) bool { return ExceptionNamespaceAllowed(s.Namespace, ns) }

// Reach is the Reach of a PolicyException of namespace ns: "" (every
// namespace) for a cluster-scoped exception or one of a platform's
// namespace (Namespace, Wide), else ns itself: a tenant's exception
// exempts only resources of its own namespace.
func (s ExceptionScope) Reach(ns string) string {
	if ns == "" || (s.Namespace != "" && s.Namespace != "*" && s.Namespace == ns) {
		return ""
	}
	for _, w := range s.Wide {
		if w == "*" || w == ns {
			return ""
		}
	}
	return ns
}

// ExceptionNamespaceAllowed says whether a PolicyException of namespace ns
// applies when exceptions are taken from namespace allowed ("" or "*":
// every namespace), as Kyverno's --exceptionNamespace (R47).
func ExceptionNamespaceAllowed(allowed, ns string) bool {
	return allowed == "" || allowed == "*" || allowed == ns
}
