package podsecurity

import (
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// containersInDetail finds the containers a check's detail names: the first
// "container(s) <names> must" of it, as Kyverno reads them for the images
// of its report properties.
var containersInDetail = regexp.MustCompile(`containers?\s*(.*?)\s*must`)

// imagesNamed returns the image references of the containers a check's
// detail names, or nil when it names none.
func imagesNamed(detail string, spec *corev1.PodSpec) []string {
	m := containersInDetail.FindStringSubmatch(detail)
	if m == nil {
		return nil
	}
	list := strings.NewReplacer(`"`, "", " ", "").Replace(m[1])
	names := strings.Split(list, ",")
	out := make([]string, 0, len(names))
	for _, name := range names {
		out = append(out, imageOf(name, spec))
	}
	return out
}

// imageOf is the full image reference of a container of the pod (its name
// when the pod has no such container).
func imageOf(name string, spec *corev1.PodSpec) string {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return reference(spec.Containers[i].Image, name)
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == name {
			return reference(spec.InitContainers[i].Image, name)
		}
	}
	for i := range spec.EphemeralContainers {
		if spec.EphemeralContainers[i].Name == name {
			return reference(spec.EphemeralContainers[i].Image, name)
		}
	}
	return name
}

// reference spells an image as a full reference: the registry (docker.io
// when the image names none), the path, then the digest if there is one,
// else the tag (latest when there is none).
func reference(image, fallback string) string {
	if image == "" {
		return fallback
	}
	ref, digest, _ := strings.Cut(image, "@")
	tag := ""
	if i := strings.LastIndex(ref, ":"); i >= 0 && !strings.Contains(ref[i:], "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	registry, path := "docker.io", ref
	if first, rest, ok := strings.Cut(ref, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		registry, path = first, rest
	}
	switch {
	case digest != "":
		return registry + "/" + path + "@" + digest
	case tag == "":
		tag = "latest"
	}
	return registry + "/" + path + ":" + tag
}
