package report

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Labels of the intermediate reports, as Kyverno set them, so that existing
// tooling recognises them. The scanner and the admission bridge write them;
// the merger reads them.
const (
	LabelResourceUID  = "audit.kyverno.io/resource.uid"
	LabelResourceHash = "audit.kyverno.io/resource.hash"
	LabelResourceGVR  = "audit.kyverno.io/resource.gvr"
	LabelSource       = "audit.kyverno.io/source"
)

// GVRLabel renders a GVR as the value of LabelResourceGVR ("v1.pods",
// "apps.v1.deployments").
func GVRLabel(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "." + gvr.Resource
	}
	return gvr.Group + "." + gvr.Version + "." + gvr.Resource
}

// ParseGVRLabel reads a LabelResourceGVR value back (the group may itself
// hold dots: "networking.k8s.io.v1.ingresses").
func ParseGVRLabel(s string) (schema.GroupVersionResource, bool) {
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || i == len(s)-1 {
		return schema.GroupVersionResource{}, false
	}
	resource, rest := s[i+1:], s[:i]
	j := strings.LastIndexByte(rest, '.')
	if j < 0 {
		return schema.GroupVersionResource{Version: rest, Resource: resource}, true
	}
	if j == 0 || j == len(rest)-1 {
		return schema.GroupVersionResource{}, false
	}
	return schema.GroupVersionResource{Group: rest[:j], Version: rest[j+1:], Resource: resource}, true
}
