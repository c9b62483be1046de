package tester

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Test is a kyverno-test.yaml document (cli.kyverno.io/v1alpha1 Test).
type Test struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Policies   []string    `json:"policies"`
	Resources  []string    `json:"resources"`
	Variables  string      `json:"variables,omitempty"`
	Values     *ValuesSpec `json:"values,omitempty"`
	UserInfo   string      `json:"userinfo,omitempty"`
	Exceptions []string    `json:"exceptions,omitempty"`
	// ParamResources are the params objects of ValidatingAdmissionPolicy bindings.
	ParamResources []string `json:"paramResources,omitempty"`
	// Context is a context file (cli.kyverno.io Context) and
	// ClusterResources are manifests: what policies read of the cluster.
	Context          string   `json:"context,omitempty"`
	ClusterResources []string `json:"clusterResources,omitempty"`
	// TargetResources are the existing resources mutateExisting rules
	// select their targets among.
	TargetResources []string `json:"targetResources,omitempty"`
	// JSONPayloads are JSON documents (files) that policies in JSON
	// evaluation mode evaluate; expectations name them as written here.
	JSONPayloads []string `json:"jsonPayloads,omitempty"`
	// EnvoyPayloads and HTTPPayloads are authorization requests (Envoy
	// CheckRequests, HTTP requests, each a JSON file) that ValidatingPolicies
	// in Envoy or HTTP evaluation mode answer.
	EnvoyPayloads []string `json:"envoyPayloads,omitempty"`
	HTTPPayloads  []string `json:"httpPayloads,omitempty"`
	// APICallResponses and GlobalContextEntries mock what policies read
	// over HTTP, through apiCalls and from GlobalContextEntries.
	APICallResponses     []APICallResponse        `json:"apiCallResponses,omitempty"`
	GlobalContextEntries []GlobalContextEntryMock `json:"globalContextEntries,omitempty"`
	Results              []TestResult             `json:"results"`
	Extra                map[string]any           `json:"-"`
	// NotRead are the inputs of the test file tally does not evaluate
	// (jsonPayloads, mocked apiCallResponses, ...): its expectations are
	// then unsupported, never passed on what was not read.
	NotRead []string `json:"-"`
}

// notReadInputs are the keys of Kyverno's Test (v1alpha1) that tally does
// not read yet.
var notReadInputs = []string{"jsonPayload"}

// TestResult is one expected result: a policy's rule on some resources.
type TestResult struct {
	Policy        string         `json:"policy"`
	Rule          string         `json:"rule,omitempty"`
	Result        string         `json:"result,omitempty"`
	Status        string         `json:"status,omitempty"` // older alias of result
	Kind          string         `json:"kind,omitempty"`
	Resources     []string       `json:"resources,omitempty"`
	Resource      string         `json:"resource,omitempty"` // older single form
	ResourceSpecs []ResourceSpec `json:"resourceSpecs,omitempty"`
	Namespace     string         `json:"namespace,omitempty"`
	// Op runs this expectation with its own operation (CREATE, UPDATE, DELETE).
	Op string `json:"operation,omitempty"`
	// Kinds of results tally does not check (mutate/generate); their presence makes the expectation unsupported.
	PatchedResources  string   `json:"patchedResources,omitempty"`
	GeneratedResource string   `json:"generatedResource,omitempty"`
	CloneSource       string   `json:"cloneSourceResource,omitempty"`
	GeneratedList     []string `json:"generatedResources,omitempty"`
	IsValidatingPol   bool     `json:"isValidatingPolicy,omitempty"`
	IsVAP             bool     `json:"isValidatingAdmissionPolicy,omitempty"`
	IsMutatingPol     bool     `json:"isMutatingPolicy,omitempty"`
	IsImageValPol     bool     `json:"isImageValidatingPolicy,omitempty"`
	IsMAP             bool     `json:"isMutatingAdmissionPolicy,omitempty"`
	IsDeletingPol     bool     `json:"isDeletingPolicy,omitempty"`
	IsGeneratingPol   bool     `json:"isGeneratingPolicy,omitempty"`
	// FailOnMissingResources fails an expectation whose resource, or
	// patched resource, is missing; without it Kyverno's CLI leaves such an
	// expectation out (tally reports it skipped, never passed).
	FailOnMissingResources bool `json:"failOnMissingResources,omitempty"`
}

// ResourceSpec selects a resource by its coordinates.
type ResourceSpec struct {
	Group       string `json:"group,omitempty"`
	Version     string `json:"version,omitempty"`
	Kind        string `json:"kind,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
}

// ValuesSpec is the body of a Values file.
type ValuesSpec struct {
	GlobalValues      map[string]any      `json:"globalValues,omitempty"`
	Policies          []PolicyValues      `json:"policies,omitempty"`
	NamespaceSelector []NamespaceSelector `json:"namespaceSelector,omitempty"`
	Namespaces        []corev1.Namespace  `json:"namespaces,omitempty"`
	// Subresources say which resource a subresource object with a kind of
	// its own belongs to (autoscaling/v1 Scale: deployments/scale of apps/v1
	// Deployment), as the cluster's discovery would.
	Subresources []Subresource `json:"subresources,omitempty"`
}

// Subresource maps a subresource (name "deployments/scale", and the group,
// version and kind of its object) to its parent resource.
type Subresource struct {
	Subresource    metav1.APIResource `json:"subresource"`
	ParentResource metav1.APIResource `json:"parentResource"`
}

// PolicyValues are the values of one policy.
type PolicyValues struct {
	Name      string           `json:"name"`
	Rules     []RuleValues     `json:"rules,omitempty"`
	Resources []ResourceValues `json:"resources,omitempty"`
}

// RuleValues are the values of one rule.
type RuleValues struct {
	Name          string           `json:"name"`
	Values        map[string]any   `json:"values,omitempty"`
	ForeachValues map[string][]any `json:"foreachValues,omitempty"`
}

// ResourceValues are the values for one resource.
type ResourceValues struct {
	Name   string         `json:"name"`
	Values map[string]any `json:"values,omitempty"`
}

// NamespaceSelector gives a namespace's labels.
type NamespaceSelector struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// UserInfoSpec is the body of a UserInfo file.
type UserInfoSpec struct {
	Roles        []string `json:"roles,omitempty"`
	ClusterRoles []string `json:"clusterRoles,omitempty"`
	UserInfo     struct {
		Username string              `json:"username,omitempty"`
		UID      string              `json:"uid,omitempty"`
		Groups   []string            `json:"groups,omitempty"`
		Extra    map[string][]string `json:"extra,omitempty"`
	} `json:"userInfo"`
}
