package engine

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/robfig/cron/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
)

// The kinds of Kyverno's DeletingPolicies.
const (
	KindDeletingPolicy           = "DeletingPolicy"
	KindNamespacedDeletingPolicy = "NamespacedDeletingPolicy"
)

// Messages of a DeletingPolicy's results, as Kyverno's CLI gives them.
const (
	MessageResourceMatched    = "resource matched"
	MessageResourceNotMatched = "resource did not match"
)

// deletingPolicy is a DeletingPolicy or NamespacedDeletingPolicy as read
// from its file.
type deletingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		MatchConstraints          *admissionregistrationv1.MatchResources  `json:"matchConstraints,omitempty"`
		Conditions                []admissionregistrationv1.MatchCondition `json:"conditions,omitempty"`
		Variables                 []admissionregistrationv1.Variable       `json:"variables,omitempty"`
		Schedule                  string                                   `json:"schedule"`
		DeletionPropagationPolicy *metav1.DeletionPropagation              `json:"deletionPropagationPolicy,omitempty"`
		Evaluation                *policiesv1.Evaluation                   `json:"evaluation,omitempty"`
	} `json:"spec"`
}

// CompileDeletingPolicy compiles a DeletingPolicy (or its namespaced kind)
// for the CLI, which reports which resources it would delete, as Kyverno's
// CLI does: of the resources its matchConstraints select, a pass
// ("resource matched") when every condition holds, else a fail ("resource
// did not match"). Its schedule must be a cron schedule. It is evaluated
// as a ValidatingPolicy whose match conditions are its conditions.
func CompileDeletingPolicy(raw []byte) (*Policy, error) {
	var dp deletingPolicy
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&dp); err != nil {
		return nil, fmt.Errorf("%s: %w", KindDeletingPolicy, err)
	}
	kind, name := dp.Kind, dp.Name
	if kind == "" {
		kind = KindDeletingPolicy
	}
	if _, err := cron.ParseStandard(dp.Spec.Schedule); err != nil {
		return nil, fmt.Errorf("%s %s: spec.schedule %q: %w", kind, name, dp.Spec.Schedule, err)
	}
	if p := dp.Spec.DeletionPropagationPolicy; p != nil && *p != metav1.DeletePropagationOrphan && *p != metav1.DeletePropagationBackground && *p != metav1.DeletePropagationForeground {
		return nil, fmt.Errorf("%s %s: spec.deletionPropagationPolicy %q: want Orphan, Background or Foreground", kind, name, *p)
	}
	mc := dp.Spec.MatchConstraints
	if mc != nil {
		// A deletion is no admission: every rule applies whatever the operation.
		mc = mc.DeepCopy()
		for i := range mc.ResourceRules {
			if len(mc.ResourceRules[i].Operations) == 0 {
				mc.ResourceRules[i].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
			}
		}
	}
	vp := &policiesv1.ValidatingPolicy{ObjectMeta: dp.ObjectMeta}
	vp.Kind = policiesv1.KindValidatingPolicy
	if kind == KindNamespacedDeletingPolicy {
		vp.Kind = policiesv1.KindNamespacedValidatingPolicy
		if vp.Namespace == "" {
			vp.Namespace = "default"
		}
	}
	vp.Spec.MatchConstraints = mc
	vp.Spec.MatchConditions = dp.Spec.Conditions
	vp.Spec.Variables = dp.Spec.Variables
	vp.Spec.Evaluation = dp.Spec.Evaluation
	vp.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "true"}}
	p, err := CompileValidatingPolicy(vp)
	if err != nil {
		return nil, err
	}
	p.Kind, p.deleting = kind, true
	return p, nil
}

// Deleting says whether the policy is a DeletingPolicy.
func (p *Policy) Deleting() bool { return p != nil && p.deleting }

// deletionResults turns the results of a DeletingPolicy evaluated as a
// ValidatingPolicy into what Kyverno's CLI reports of it.
func deletionResults(in []RuleResult) []RuleResult {
	out := in[:0]
	for _, r := range in {
		switch {
		case r.Result == Pass:
			r.Message = MessageResourceMatched
		case r.Result == Skip && r.ConditionsNotMet:
			r.Result, r.Message, r.ConditionsNotMet = Fail, MessageResourceNotMatched, false
		}
		r.Properties = nil
		out = append(out, r)
	}
	return out
}
