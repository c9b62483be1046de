package v1

import apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

// AnyAllConditions hold when any of Any holds (or Any is empty) and all of
// All hold.
type AnyAllConditions struct {
	Any []Condition `json:"any,omitempty"`
	All []Condition `json:"all,omitempty"`
}

// Condition compares a key with a value using an operator
// (Equals, NotEquals, In, AnyIn, AllIn, NotIn, AnyNotIn, AllNotIn,
// GreaterThan, GreaterThanOrEquals, LessThan, LessThanOrEquals,
// DurationGreaterThan, ...). Key and value may hold variables.
type Condition struct {
	Key      *apiextv1.JSON `json:"key,omitempty"`
	Operator string         `json:"operator,omitempty"`
	Value    *apiextv1.JSON `json:"value,omitempty"`
	Message  string         `json:"message,omitempty"`
}
