package report

import (
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and annotations of the intermediate reports, as Kyverno sets them,
// so that existing tooling recognises them. The scanner and the admission
// bridge write them; the merger and the ingestion of Kyverno's own reports
// read them.
const (
	LabelResourceUID     = "audit.kyverno.io/resource.uid"
	LabelResourceHash    = "audit.kyverno.io/resource.hash"
	LabelResourceGVR     = "audit.kyverno.io/resource.gvr"
	LabelResourceGroup   = "audit.kyverno.io/resource.group"
	LabelResourceVersion = "audit.kyverno.io/resource.version"
	LabelResourceKind    = "audit.kyverno.io/resource.kind"
	LabelSource          = "audit.kyverno.io/source"
	// The resource's name and namespace are annotations: a name can be
	// longer than a label value may be.
	AnnotationResourceName      = "audit.kyverno.io/resource.name"
	AnnotationResourceNamespace = "audit.kyverno.io/resource.namespace"
)

// GVRLabel renders a GVR as the value of LabelResourceGVR, in Kyverno's
// form: "pods.v1", "deployments.v1.apps". The value may be longer than a
// label value may be: ResourceTypeLabels decides whether it is used.
func GVRLabel(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "." + gvr.Version
	}
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}

// ResourceTypeLabels sets the labels naming the type of a report's
// resource. The GVR label is set when its value is a valid label value (at
// most 63 characters). A longer GVR (a CRD with a long group, say) would make
// the API server refuse the whole report, so it is replaced by one label per
// group, version and kind, each set only when valid: a reader then maps
// group, version and kind (or the report's owner) to the resource.
func ResourceTypeLabels(labels map[string]string, gvr schema.GroupVersionResource, kind string) {
	delete(labels, LabelResourceGVR)
	delete(labels, LabelResourceGroup)
	delete(labels, LabelResourceVersion)
	delete(labels, LabelResourceKind)
	if v := GVRLabel(gvr); validLabelValue(v) {
		labels[LabelResourceGVR] = v
		return
	}
	for k, v := range map[string]string{LabelResourceGroup: gvr.Group, LabelResourceVersion: gvr.Version, LabelResourceKind: kind} {
		if v != "" && validLabelValue(v) {
			labels[k] = v
		}
	}
}

func validLabelValue(v string) bool { return len(validation.IsValidLabelValue(v)) == 0 }

// versionRE matches a Kubernetes API version ("v1", "v2beta1", "v1alpha2").
var versionRE = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?$`)

// ParseGVRLabel reads a LabelResourceGVR value back. It reads Kyverno's
// form ("pods.v1", "ingresses.v1.networking.k8s.io") and the form earlier
// tally releases wrote ("v1.pods", "networking.k8s.io.v1.ingresses"): the
// component that is an API version tells them apart.
func ParseGVRLabel(s string) (schema.GroupVersionResource, bool) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return schema.GroupVersionResource{}, false
	}
	for _, p := range parts {
		if p == "" {
			return schema.GroupVersionResource{}, false
		}
	}
	if versionRE.MatchString(parts[1]) { // Kyverno's: resource.version[.group]
		return schema.GroupVersionResource{Resource: parts[0], Version: parts[1], Group: strings.Join(parts[2:], ".")}, true
	}
	n := len(parts) // earlier tally's: [group.]version.resource
	if versionRE.MatchString(parts[n-2]) {
		return schema.GroupVersionResource{Group: strings.Join(parts[:n-2], "."), Version: parts[n-2], Resource: parts[n-1]}, true
	}
	return schema.GroupVersionResource{}, false
}

// ResourceGVR reads the type of a report's resource from its labels: the
// GVR label, or the group and version labels (then the resource is unknown
// and only the GroupVersion and kind are returned).
func ResourceGVR(labels map[string]string) (gvr schema.GroupVersionResource, kind string, ok bool) {
	if gvr, ok := ParseGVRLabel(labels[LabelResourceGVR]); ok {
		return gvr, labels[LabelResourceKind], true
	}
	if v := labels[LabelResourceVersion]; v != "" {
		return schema.GroupVersionResource{Group: labels[LabelResourceGroup], Version: v}, labels[LabelResourceKind], false
	}
	return schema.GroupVersionResource{}, labels[LabelResourceKind], false
}

// ReportOwner names the resource an intermediate report is about: its
// spec.owner, else its ownerReference, else (Kyverno 1.13+ admission
// reports carry an empty owner and no ownerReferences) its resource labels
// and annotations. ok is false when the report does not name a whole
// resource (a UID, kind, apiVersion and name): such a report describes
// nothing that can be reported on.
func ReportOwner(meta metav1.Object, owner metav1.OwnerReference) (ref metav1.OwnerReference, namespace string, ok bool) {
	labels, ann := meta.GetLabels(), meta.GetAnnotations()
	uid := types.UID(labels[LabelResourceUID])
	namespace = meta.GetNamespace()
	if ns := ann[AnnotationResourceNamespace]; ns != "" {
		namespace = ns
	}
	switch {
	case owner.UID != "" && (uid == "" || owner.UID == uid):
		ref = owner
	default:
		for _, o := range meta.GetOwnerReferences() {
			if uid == "" || o.UID == uid {
				ref = o
				break
			}
		}
	}
	if ref.UID == "" && uid != "" {
		gvr, kind, _ := ResourceGVR(labels)
		ref = metav1.OwnerReference{
			APIVersion: schema.GroupVersion{Group: gvr.Group, Version: gvr.Version}.String(),
			Kind:       kind, Name: ann[AnnotationResourceName], UID: uid,
		}
		if gvr.Version == "" {
			ref.APIVersion = ""
		}
	}
	ref.Controller, ref.BlockOwnerDeletion = nil, nil
	ok = ref.UID != "" && ref.Kind != "" && ref.APIVersion != "" && ref.Name != ""
	return ref, namespace, ok
}

// LabelReportsDisabled on a policy keeps its results out of the reports
// (R27).
const LabelReportsDisabled = "reports.kyverno.io/disabled"

// ReportingDisabled says whether a policy's labels keep its results out of
// the reports: the label is present, whatever its value, as Kyverno reads
// it (its reports controller selects policies where the label does not
// exist).
func ReportingDisabled(labels map[string]string) bool {
	_, ok := labels[LabelReportsDisabled]
	return ok
}
