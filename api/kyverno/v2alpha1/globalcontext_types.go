package v2alpha1

import (
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func knownTypes() []runtime.Object {
	return []runtime.Object{&GlobalContextEntry{}, &GlobalContextEntryList{}}
}

// GlobalContextEntry is data kept current for every policy to read: the
// objects of one resource (kept by a watch), or the answer of an API call
// (refreshed on an interval). Policies read it with a globalReference
// context entry or CEL's globalContext.Get.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gctxentry,categories=kyverno
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
type GlobalContextEntry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GlobalContextEntrySpec `json:"spec"`
	// +optional
	Status GlobalContextEntryStatus `json:"status,omitempty"`
}

// GlobalContextEntrySpec names the data: kubernetesResource or apiCall.
type GlobalContextEntrySpec struct {
	// KubernetesResource keeps the objects of one resource.
	// +optional
	KubernetesResource *KubernetesResource `json:"kubernetesResource,omitempty"`
	// APICall keeps the answer of an API call, refreshed on an interval.
	// +optional
	APICall *ExternalAPICall `json:"apiCall,omitempty"`
	// Projections are named JMESPath views of the data.
	// +optional
	Projections []Projection `json:"projections,omitempty"`
}

// KubernetesResource names a resource: its group, version and plural, and
// a namespace ("" for every namespace, or a cluster-scoped resource).
type KubernetesResource struct {
	// +optional
	Group    string `json:"group,omitempty"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// ExternalAPICall is an API call (urlPath) or a call to a service, and how
// often it is made.
type ExternalAPICall struct {
	// +optional
	URLPath string `json:"urlPath,omitempty"`
	// +optional
	Method string `json:"method,omitempty"`
	// Data is the body of a POST: a list of {key, value}.
	// +optional
	Data *apiextv1.JSON `json:"data,omitempty"`
	// Service is a call to a service: {url, caBundle, headers}.
	// +optional
	Service *apiextv1.JSON `json:"service,omitempty"`
	// RefreshInterval is how often the call is made (default 10m).
	// +optional
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
	// RetryLimit is how many times a failed call is retried (default 3).
	// +optional
	RetryLimit int `json:"retryLimit,omitempty"`
}

// Projection is a named JMESPath view of an entry's data.
type Projection struct {
	Name     string `json:"name"`
	JMESPath string `json:"jmesPath"`
}

// GlobalContextEntryStatus is written by whoever keeps the entry (Kyverno).
type GlobalContextEntryStatus struct {
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	LastRefreshTime metav1.Time `json:"lastRefreshTime,omitempty"`
}

// GlobalContextEntryList is a list of GlobalContextEntries.
//
// +kubebuilder:object:root=true
type GlobalContextEntryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalContextEntry `json:"items"`
}
