package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Rule is one rule of a policy: where it applies (match/exclude,
// preconditions) and what it checks. tally evaluates validate rules; the
// other rule types are kept so that such policies round-trip, and ignored.
type Rule struct {
	Name string `json:"name"`
	// Context loads variables before the rule is evaluated.
	Context []ContextEntry `json:"context,omitempty"`
	// Match selects the resources the rule applies to.
	Match MatchResources `json:"match,omitempty"`
	// Exclude removes resources from those matched.
	Exclude *MatchResources `json:"exclude,omitempty"`
	// ImageExtractors describe where images are found in custom kinds.
	ImageExtractors *apiextv1.JSON `json:"imageExtractors,omitempty"`
	// Preconditions must hold for the rule to apply: either {any, all}
	// or a plain list of conditions (all must hold).
	Preconditions *apiextv1.JSON `json:"preconditions,omitempty"`
	// CELPreconditions are CEL match conditions.
	CELPreconditions []admissionregistrationv1.MatchCondition `json:"celPreconditions,omitempty"`
	// Validate is the validation this rule performs.
	Validate *Validation `json:"validate,omitempty"`
	// Mutate and Generate are not evaluated by tally; VerifyImages is read
	// by engine/imageverify.
	Mutate       *apiextv1.JSON `json:"mutate,omitempty"`
	Generate     *apiextv1.JSON `json:"generate,omitempty"`
	VerifyImages *apiextv1.JSON `json:"verifyImages,omitempty"`
	// SkipBackgroundRequests skips admission requests made by background controllers.
	SkipBackgroundRequests *bool `json:"skipBackgroundRequests,omitempty"`
	// ReportProperties are copied into every result of the rule.
	ReportProperties map[string]string `json:"reportProperties,omitempty"`
}

// HasValidate reports whether the rule is a validate rule.
func (r *Rule) HasValidate() bool { return r.Validate != nil }

// Validation is the body of a validate rule. Exactly one of pattern,
// anyPattern, deny, foreach, podSecurity, cel, manifests or assert is set.
type Validation struct {
	// FailureAction overrides the policy-level validationFailureAction for this rule.
	// +kubebuilder:validation:Enum=Audit;Enforce
	FailureAction *ValidationFailureAction `json:"failureAction,omitempty"`
	// FailureActionOverrides override the action per namespace.
	FailureActionOverrides []ValidationFailureActionOverride `json:"failureActionOverrides,omitempty"`
	// AllowExistingViolations admits updates to resources that already violated the rule.
	AllowExistingViolations *bool `json:"allowExistingViolations,omitempty"`
	// Message is reported when the rule fails; it may contain variables.
	Message string `json:"message,omitempty"`
	// Pattern is an overlay pattern the resource must match.
	Pattern *apiextv1.JSON `json:"pattern,omitempty"`
	// AnyPattern is a list of patterns of which one must match.
	AnyPattern *apiextv1.JSON `json:"anyPattern,omitempty"`
	// Deny fails the rule when its conditions hold.
	Deny *Deny `json:"deny,omitempty"`
	// ForEach validates each element of a list.
	ForEach []ForEachValidation `json:"foreach,omitempty"`
	// PodSecurity applies a Pod Security Standards level.
	PodSecurity *PodSecurity `json:"podSecurity,omitempty"`
	// CEL, Manifests and Assert are kept; tally reports them as unsupported.
	CEL       *apiextv1.JSON `json:"cel,omitempty"`
	Manifests *apiextv1.JSON `json:"manifests,omitempty"`
	Assert    *apiextv1.JSON `json:"assert,omitempty"`
}

// Deny holds the conditions under which a request is denied.
type Deny struct {
	// Conditions are {any, all} or a plain list of conditions.
	Conditions *apiextv1.JSON `json:"conditions,omitempty"`
}

// ForEachValidation validates every element of the list that List selects.
type ForEachValidation struct {
	// List is a JMESPath expression that yields the elements.
	List string `json:"list"`
	// ElementScope says whether patterns apply to the element (default: true
	// for patterns over the element).
	ElementScope *bool `json:"elementScope,omitempty"`
	// Context is evaluated once per element.
	Context []ContextEntry `json:"context,omitempty"`
	// Preconditions filter the elements.
	Preconditions *apiextv1.JSON `json:"preconditions,omitempty"`
	Pattern       *apiextv1.JSON `json:"pattern,omitempty"`
	AnyPattern    *apiextv1.JSON `json:"anyPattern,omitempty"`
	Deny          *Deny          `json:"deny,omitempty"`
	// ForEach nests a further foreach (a list of ForEachValidation).
	ForEach *apiextv1.JSON `json:"foreach,omitempty"`
}

// PodSecurity applies a Pod Security Standards profile.
type PodSecurity struct {
	// Level is privileged, baseline or restricted.
	// +kubebuilder:validation:Enum=privileged;baseline;restricted
	Level string `json:"level,omitempty"`
	// Version is a Kubernetes minor version ("v1.29") or "latest".
	Version string `json:"version,omitempty"`
	// Exclude exempts controls, optionally for some images or values.
	Exclude []PodSecurityStandard `json:"exclude,omitempty"`
}

// PodSecurityStandard exempts one control of a Pod Security Standards level.
type PodSecurityStandard struct {
	ControlName     string   `json:"controlName"`
	Images          []string `json:"images,omitempty"`
	RestrictedField string   `json:"restrictedField,omitempty"`
	Values          []string `json:"values,omitempty"`
}

// ContextEntry loads one variable into the rule's context.
type ContextEntry struct {
	Name            string                       `json:"name"`
	ConfigMap       *ConfigMapReference          `json:"configMap,omitempty"`
	APICall         *ContextAPICall              `json:"apiCall,omitempty"`
	ImageRegistry   *ImageRegistry               `json:"imageRegistry,omitempty"`
	Variable        *Variable                    `json:"variable,omitempty"`
	GlobalReference *GlobalContextEntryReference `json:"globalReference,omitempty"`
}

// ConfigMapReference names a ConfigMap.
type ConfigMapReference struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// ContextAPICall loads the result of a Kubernetes API or service call.
type ContextAPICall struct {
	URLPath string `json:"urlPath,omitempty"`
	// Method is GET (the default) or POST, as in Kyverno's CRD: tally
	// makes no other call (R47).
	// +kubebuilder:validation:Enum=GET;POST
	Method   string         `json:"method,omitempty"`
	Data     *apiextv1.JSON `json:"data,omitempty"`
	Service  *apiextv1.JSON `json:"service,omitempty"`
	JMESPath string         `json:"jmesPath,omitempty"`
	Default  *apiextv1.JSON `json:"default,omitempty"`
}

// ImageRegistry loads image metadata from a registry.
type ImageRegistry struct {
	Reference                string         `json:"reference"`
	JMESPath                 string         `json:"jmesPath,omitempty"`
	ImageRegistryCredentials *apiextv1.JSON `json:"imageRegistryCredentials,omitempty"`
}

// Variable defines a variable from a value or a JMESPath expression.
type Variable struct {
	Value    *apiextv1.JSON `json:"value,omitempty"`
	JMESPath string         `json:"jmesPath,omitempty"`
	Default  *apiextv1.JSON `json:"default,omitempty"`
}

// GlobalContextEntryReference reads a global context entry.
type GlobalContextEntryReference struct {
	Name     string `json:"name"`
	JMESPath string `json:"jmesPath,omitempty"`
}
