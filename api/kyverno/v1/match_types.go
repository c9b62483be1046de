package v1

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdmissionOperation is an admission request operation.
// +kubebuilder:validation:Enum=CREATE;CONNECT;UPDATE;DELETE
type AdmissionOperation string

// MatchResources selects resources: any of Any, all of All, or (the older
// form) the inline UserInfo and Resources.
type MatchResources struct {
	Any       ResourceFilters `json:"any,omitempty"`
	All       ResourceFilters `json:"all,omitempty"`
	UserInfo  `json:",omitempty"`
	Resources ResourceDescription `json:"resources,omitempty"`
}

// ResourceFilters is a list of filters.
type ResourceFilters []ResourceFilter

// ResourceFilter selects resources by description and by requesting user.
type ResourceFilter struct {
	UserInfo  `json:",omitempty"`
	Resources ResourceDescription `json:"resources,omitempty"`
}

// UserInfo selects requests by the requesting user (admission only).
type UserInfo struct {
	Roles        []string         `json:"roles,omitempty"`
	ClusterRoles []string         `json:"clusterRoles,omitempty"`
	Subjects     []rbacv1.Subject `json:"subjects,omitempty"`
}

// IsEmpty reports whether no user criteria are set.
func (u UserInfo) IsEmpty() bool {
	return len(u.Roles) == 0 && len(u.ClusterRoles) == 0 && len(u.Subjects) == 0
}

// ResourceDescription describes resources by kind, name, namespace, labels,
// annotations and operation. Names and namespaces accept wildcards.
type ResourceDescription struct {
	// Kinds are "Kind", "group/version/Kind", "version/Kind" or "Kind/subresource"; wildcards allowed.
	Kinds []string `json:"kinds,omitempty"`
	// Name is deprecated; use Names.
	Name              string                `json:"name,omitempty"`
	Names             []string              `json:"names,omitempty"`
	Namespaces        []string              `json:"namespaces,omitempty"`
	Annotations       map[string]string     `json:"annotations,omitempty"`
	Selector          *metav1.LabelSelector `json:"selector,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	Operations        []AdmissionOperation  `json:"operations,omitempty"`
}

// IsEmpty reports whether no resource criteria are set.
func (r *ResourceDescription) IsEmpty() bool {
	return len(r.Kinds) == 0 && r.Name == "" && len(r.Names) == 0 && len(r.Namespaces) == 0 &&
		len(r.Annotations) == 0 && r.Selector == nil && r.NamespaceSelector == nil && len(r.Operations) == 0
}
